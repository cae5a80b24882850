-- 10: what a node's gallery search state needs to follow the catalog book by book instead of reading every
-- illustration again after each write (imagesvc/search/changes.py). gallery_changes holds one row per book: the
-- sequence number of the last write that changed what the gallery table reads of it (an illustration added,
-- deleted or changed; the book's year or withdrawal; the book deleted), kept by triggers, so ingest and operator
-- writes need not know it exists. Catalog writers commit one after another (catalog_state's row lock), so the
-- numbers are in commit order. A node remembers the highest number it has read and, after a write, reads only
-- the books above it.
-- And the illustration search vector is stored (search_doc) instead of computed: ts_rank read it again for every
-- matching row through the non-inlinable imagesvc_illustration_doc (1.3 s for "gold" at 200,000 illustrations,
-- 11,202 matches; ~40 ms stored). Same function, same GIN index, same values.
CREATE TABLE gallery_changes (
    book_id TEXT PRIMARY KEY,
    seq BIGINT NOT NULL
);
CREATE INDEX gallery_changes_by_seq ON gallery_changes (seq);
CREATE SEQUENCE gallery_change_seq;
CREATE FUNCTION imagesvc_log_gallery_change(book TEXT) RETURNS void LANGUAGE SQL AS $$
    INSERT INTO gallery_changes (book_id, seq) VALUES (book, nextval('gallery_change_seq'))
    ON CONFLICT (book_id) DO UPDATE SET seq = excluded.seq
$$;
CREATE FUNCTION imagesvc_log_gallery_illustration() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        PERFORM imagesvc_log_gallery_change(OLD.book_id);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        PERFORM imagesvc_log_gallery_change(NEW.book_id);
    END IF;
    RETURN NULL;
END
$$;
CREATE FUNCTION imagesvc_log_gallery_book() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM imagesvc_log_gallery_change(OLD.id);
    ELSIF OLD.year IS DISTINCT FROM NEW.year OR OLD.withdrawn IS DISTINCT FROM NEW.withdrawn THEN
        PERFORM imagesvc_log_gallery_change(NEW.id);
    END IF;
    RETURN NULL;
END
$$;
ALTER FUNCTION imagesvc_log_gallery_change(TEXT) SET search_path FROM CURRENT;
ALTER FUNCTION imagesvc_log_gallery_illustration() SET search_path FROM CURRENT;
ALTER FUNCTION imagesvc_log_gallery_book() SET search_path FROM CURRENT;
CREATE TRIGGER gallery_changes_illustration AFTER INSERT OR UPDATE OR DELETE ON illustrations
    FOR EACH ROW EXECUTE FUNCTION imagesvc_log_gallery_illustration();
CREATE TRIGGER gallery_changes_book AFTER UPDATE OF year, withdrawn OR DELETE ON books
    FOR EACH ROW EXECUTE FUNCTION imagesvc_log_gallery_book();
ALTER TABLE illustrations ADD COLUMN search_doc tsvector
    GENERATED ALWAYS AS (imagesvc_illustration_doc(description, museum_description, subjects, figures, symbols)) STORED;
CREATE INDEX illustrations_search_doc ON illustrations USING gin (search_doc);
DROP INDEX illustrations_search;
