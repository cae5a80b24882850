-- 6: what the bulk dataset listing and its change feed need (imagesvc/catalog/dataset.py). Byte sizes and SHA-256
-- of clean copies and masters (the public tier's were recorded from the start), and a log of book changes
-- (book_changes: one row per Create, Update or Delete of a book, in commit order) kept by triggers, so ingest and
-- operator writes need not know the feed exists. A book counts as updated when its source manifest hash changes,
-- deleted when withdrawn or removed, created again when a withdrawn book comes back. Existing books are logged as
-- created at their ingest time.
ALTER TABLE renditions ADD COLUMN clean_sha256 TEXT;
ALTER TABLE renditions ADD COLUMN clean_bytes INTEGER;
ALTER TABLE pages ADD COLUMN master_bytes INTEGER;
CREATE TABLE book_changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    book_id TEXT NOT NULL,
    slug TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('Create', 'Update', 'Delete')),
    at TEXT NOT NULL
);
CREATE INDEX book_changes_by_book ON book_changes (book_id, seq);
INSERT INTO book_changes (book_id, slug, kind, at)
    SELECT id, slug, 'Create', ingested_at FROM books WHERE withdrawn = 0 ORDER BY ingested_at, id;
CREATE TRIGGER book_changes_ai AFTER INSERT ON books BEGIN
    INSERT INTO book_changes (book_id, slug, kind, at)
    VALUES (new.id, new.slug, 'Create', strftime('%Y-%m-%dT%H:%M:%S+00:00', 'now'));
END;
CREATE TRIGGER book_changes_au AFTER UPDATE OF source_hash, withdrawn ON books
WHEN old.source_hash IS NOT new.source_hash OR old.withdrawn IS NOT new.withdrawn BEGIN
    INSERT INTO book_changes (book_id, slug, kind, at)
    VALUES (new.id, new.slug,
        CASE WHEN new.withdrawn = 1 THEN 'Delete' WHEN old.withdrawn = 1 THEN 'Create' ELSE 'Update' END,
        strftime('%Y-%m-%dT%H:%M:%S+00:00', 'now'));
END;
CREATE TRIGGER book_changes_ad AFTER DELETE ON books BEGIN
    INSERT INTO book_changes (book_id, slug, kind, at)
    VALUES (old.id, old.slug, 'Delete', strftime('%Y-%m-%dT%H:%M:%S+00:00', 'now'));
END;
