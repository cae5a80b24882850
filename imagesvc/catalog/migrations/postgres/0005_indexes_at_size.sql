-- 5: what a catalog of millions of pages needs. Ingest replaces a page's illustrations by page_id; /health counts
-- the pages without an image from a partial index. PostgreSQL only: catalog_state.changes counts committed catalog
-- writes (what SQLite's PRAGMA data_version tells a reader), so each node's search state sees a change by another.
CREATE INDEX illustrations_by_page ON illustrations (page_id);
CREATE INDEX pages_without_image ON pages (book_id, image_unavailable) WHERE image_unavailable = 1;
CREATE TABLE catalog_state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    changes BIGINT NOT NULL
);
INSERT INTO catalog_state (id, changes) VALUES (1, 0);
