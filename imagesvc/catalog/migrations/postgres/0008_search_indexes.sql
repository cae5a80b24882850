-- 8: the search indexes that `imagesvc index` computes once and publishes to the object store (text vectors, CLIP
-- vectors, the image-match block index; imagesvc/search/published.py): one row per kind names the current version
-- by the sha256 of its manifest object, which lists every file by its own sha256. Serving nodes download and verify
-- what a row names; they never build an index themselves. A row is written in a catalog transaction, which bumps
-- catalog_state.changes: nodes follow a new index where they follow every other catalog change.
CREATE TABLE IF NOT EXISTS search_indexes (
    kind TEXT PRIMARY KEY CHECK (kind IN ('text', 'clip', 'blocks')),
    digest TEXT NOT NULL,
    object_key TEXT NOT NULL,
    model TEXT NOT NULL DEFAULT '',
    illustrations INTEGER NOT NULL DEFAULT 0,
    bytes BIGINT NOT NULL DEFAULT 0,
    built_at TEXT NOT NULL
);
