-- 6: what the bulk dataset listing and its change feed need (imagesvc/catalog/dataset.py). Byte sizes and SHA-256
-- of clean copies and masters (the public tier's were recorded from the start), and a log of book changes
-- (book_changes: one row per Create, Update or Delete of a book, in commit order) kept by triggers, so ingest and
-- operator writes need not know the feed exists. A book counts as updated when its source manifest hash changes,
-- deleted when withdrawn or removed, created again when a withdrawn book comes back. Existing books are logged as
-- created at their ingest time.
ALTER TABLE renditions ADD COLUMN clean_sha256 TEXT;
ALTER TABLE renditions ADD COLUMN clean_bytes BIGINT;
ALTER TABLE pages ADD COLUMN master_bytes BIGINT;
CREATE TABLE book_changes (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    book_id TEXT NOT NULL,
    slug TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('Create', 'Update', 'Delete')),
    at TEXT NOT NULL
);
CREATE INDEX book_changes_by_book ON book_changes (book_id, seq);
INSERT INTO book_changes (book_id, slug, kind, at)
    SELECT id, slug, 'Create', ingested_at FROM books WHERE withdrawn = 0 ORDER BY ingested_at, id;
CREATE FUNCTION imagesvc_now_text() RETURNS TEXT LANGUAGE SQL STABLE AS $$
    SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"+00:00"')
$$;
CREATE FUNCTION imagesvc_log_book_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO book_changes (book_id, slug, kind, at) VALUES (NEW.id, NEW.slug, 'Create', imagesvc_now_text());
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO book_changes (book_id, slug, kind, at) VALUES (OLD.id, OLD.slug, 'Delete', imagesvc_now_text());
    ELSIF OLD.source_hash IS DISTINCT FROM NEW.source_hash OR OLD.withdrawn IS DISTINCT FROM NEW.withdrawn THEN
        INSERT INTO book_changes (book_id, slug, kind, at) VALUES (NEW.id, NEW.slug,
            CASE WHEN NEW.withdrawn = 1 THEN 'Delete' WHEN OLD.withdrawn = 1 THEN 'Create' ELSE 'Update' END,
            imagesvc_now_text());
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER book_changes_ai AFTER INSERT ON books FOR EACH ROW EXECUTE FUNCTION imagesvc_log_book_change();
CREATE TRIGGER book_changes_au AFTER UPDATE OF source_hash, withdrawn ON books
    FOR EACH ROW EXECUTE FUNCTION imagesvc_log_book_change();
CREATE TRIGGER book_changes_ad AFTER DELETE ON books FOR EACH ROW EXECUTE FUNCTION imagesvc_log_book_change();
