-- 8: the search indexes that `imagesvc index` computes once and publishes to the object store (text vectors, CLIP
-- vectors, the image-match block index; imagesvc/search/published.py): one row per kind names the current version
-- by the sha256 of its manifest object, which lists every file by its own sha256. Serving nodes download and verify
-- what a row names; they never build an index themselves. Writing a row is a catalog write, so nodes see it where
-- they see every other change (PRAGMA data_version here, catalog_state.changes on PostgreSQL).
CREATE TABLE IF NOT EXISTS search_indexes (
    kind TEXT PRIMARY KEY CHECK (kind IN ('text', 'clip', 'blocks')),
    digest TEXT NOT NULL,  -- sha256 of the manifest object
    object_key TEXT NOT NULL,  -- the manifest's key in the object store
    model TEXT NOT NULL DEFAULT '',  -- the model (or feature parameters) the index was made with
    illustrations INTEGER NOT NULL DEFAULT 0,
    bytes INTEGER NOT NULL DEFAULT 0,  -- its files together
    built_at TEXT NOT NULL
);
