-- 11: the counts /health shows, kept by triggers instead of counted after every catalog change. book_counts holds
-- one row per book (withdrawn ones included: withdrawing or restoring a book changes no count here, the reader joins
-- books for withdrawn = 0): its pages, its pages without an image and its illustrations not removed. Every write
-- that touches those rows keeps it, whoever makes it; a rolled-back transaction takes its triggers' updates with it;
-- two writers add their deltas to the row one after the other (an UPDATE waits on the row and re-reads it), so the
-- counts stay exact. Reading the library's counts is then a pass over the books, not over millions of pages.
CREATE TABLE book_counts (
    book_id TEXT PRIMARY KEY,
    pages BIGINT NOT NULL DEFAULT 0,
    pages_without_image BIGINT NOT NULL DEFAULT 0,
    illustrations BIGINT NOT NULL DEFAULT 0
);
-- Writers of an older imagesvc still running wait here until this migration commits: no page or illustration can
-- be written between the backfill below and the triggers that keep it.
LOCK TABLE books, pages, illustrations IN SHARE ROW EXCLUSIVE MODE;
CREATE FUNCTION imagesvc_count_book() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO book_counts (book_id) VALUES (NEW.id) ON CONFLICT (book_id) DO NOTHING;
    ELSE
        DELETE FROM book_counts WHERE book_id = OLD.id;
    END IF;
    RETURN NULL;
END
$$;
CREATE FUNCTION imagesvc_count_page() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.book_id = NEW.book_id AND OLD.image_unavailable = NEW.image_unavailable THEN
        RETURN NULL;
    END IF;
    IF TG_OP <> 'INSERT' THEN
        UPDATE book_counts SET pages = pages - 1,
            pages_without_image = pages_without_image - (OLD.image_unavailable = 1)::int
        WHERE book_id = OLD.book_id;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        UPDATE book_counts SET pages = pages + 1,
            pages_without_image = pages_without_image + (NEW.image_unavailable = 1)::int
        WHERE book_id = NEW.book_id;
    END IF;
    RETURN NULL;
END
$$;
CREATE FUNCTION imagesvc_count_illustration() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.book_id = NEW.book_id AND (OLD.removed = 0) = (NEW.removed = 0) THEN
        RETURN NULL;
    END IF;
    IF TG_OP <> 'INSERT' AND OLD.removed = 0 THEN
        UPDATE book_counts SET illustrations = illustrations - 1 WHERE book_id = OLD.book_id;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.removed = 0 THEN
        UPDATE book_counts SET illustrations = illustrations + 1 WHERE book_id = NEW.book_id;
    END IF;
    RETURN NULL;
END
$$;
ALTER FUNCTION imagesvc_count_book() SET search_path FROM CURRENT;
ALTER FUNCTION imagesvc_count_page() SET search_path FROM CURRENT;
ALTER FUNCTION imagesvc_count_illustration() SET search_path FROM CURRENT;
CREATE TRIGGER book_counts_book AFTER INSERT OR DELETE ON books
    FOR EACH ROW EXECUTE FUNCTION imagesvc_count_book();
CREATE TRIGGER book_counts_page AFTER INSERT OR DELETE OR UPDATE OF book_id, image_unavailable ON pages
    FOR EACH ROW EXECUTE FUNCTION imagesvc_count_page();
CREATE TRIGGER book_counts_illustration AFTER INSERT OR DELETE OR UPDATE OF book_id, removed ON illustrations
    FOR EACH ROW EXECUTE FUNCTION imagesvc_count_illustration();
-- The existing books' counts: one pass over each table, aggregated by book in the server (memory bounded by
-- work_mem, spilling to disk past it), nothing sent to the migrating process.
INSERT INTO book_counts (book_id, pages, pages_without_image, illustrations)
SELECT b.id, coalesce(p.pages, 0), coalesce(p.without_image, 0), coalesce(i.illustrations, 0)
FROM books b
LEFT JOIN (
    SELECT book_id, count(*) AS pages, count(*) FILTER (WHERE image_unavailable = 1) AS without_image
    FROM pages GROUP BY book_id
) p ON p.book_id = b.id
LEFT JOIN (
    SELECT book_id, count(*) AS illustrations FROM illustrations WHERE removed = 0 GROUP BY book_id
) i ON i.book_id = b.id;
