-- 11: the counts /health shows, kept by triggers instead of counted after every catalog change (2.3-8.6 s of a core
-- a change at 4.5 million pages). book_counts holds one row per book (withdrawn ones included: withdrawing or
-- restoring a book changes no count here, the reader joins books for withdrawn = 0): its pages, its pages without an
-- image and its illustrations not removed. Every write that touches those rows keeps it, whoever makes it (ingest,
-- operators, a rolled-back transaction undoes its triggers' updates with it), so reading the library's counts is a
-- pass over the books (15,000 rows), not over 4.5 million pages.
CREATE TABLE book_counts (
    book_id TEXT PRIMARY KEY,
    pages INTEGER NOT NULL DEFAULT 0,
    pages_without_image INTEGER NOT NULL DEFAULT 0,
    illustrations INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE TRIGGER book_counts_book_ai AFTER INSERT ON books BEGIN
    INSERT INTO book_counts (book_id) VALUES (new.id) ON CONFLICT (book_id) DO NOTHING;
END;
CREATE TRIGGER book_counts_book_ad AFTER DELETE ON books BEGIN
    DELETE FROM book_counts WHERE book_id = old.id;
END;
CREATE TRIGGER book_counts_page_ai AFTER INSERT ON pages BEGIN
    UPDATE book_counts SET pages = pages + 1, pages_without_image = pages_without_image + (new.image_unavailable = 1)
    WHERE book_id = new.book_id;
END;
CREATE TRIGGER book_counts_page_ad AFTER DELETE ON pages BEGIN
    UPDATE book_counts SET pages = pages - 1, pages_without_image = pages_without_image - (old.image_unavailable = 1)
    WHERE book_id = old.book_id;
END;
CREATE TRIGGER book_counts_page_au AFTER UPDATE OF book_id, image_unavailable ON pages
WHEN old.book_id IS NOT new.book_id OR old.image_unavailable IS NOT new.image_unavailable BEGIN
    UPDATE book_counts SET pages = pages - 1, pages_without_image = pages_without_image - (old.image_unavailable = 1)
    WHERE book_id = old.book_id;
    UPDATE book_counts SET pages = pages + 1, pages_without_image = pages_without_image + (new.image_unavailable = 1)
    WHERE book_id = new.book_id;
END;
CREATE TRIGGER book_counts_illustration_ai AFTER INSERT ON illustrations WHEN new.removed = 0 BEGIN
    UPDATE book_counts SET illustrations = illustrations + 1 WHERE book_id = new.book_id;
END;
CREATE TRIGGER book_counts_illustration_ad AFTER DELETE ON illustrations WHEN old.removed = 0 BEGIN
    UPDATE book_counts SET illustrations = illustrations - 1 WHERE book_id = old.book_id;
END;
CREATE TRIGGER book_counts_illustration_au AFTER UPDATE OF book_id, removed ON illustrations
WHEN old.book_id IS NOT new.book_id OR (old.removed = 0) IS NOT (new.removed = 0) BEGIN
    UPDATE book_counts SET illustrations = illustrations - (old.removed = 0) WHERE book_id = old.book_id;
    UPDATE book_counts SET illustrations = illustrations + (new.removed = 0) WHERE book_id = new.book_id;
END;
-- The existing books' counts, in this migration's write transaction (no write can come between the count and the
-- triggers). One statement over the books, each count from an index (the pages' (book_id, number) key, the partial
-- index pages_without_image, illustrations_by_book): no page row is read and nothing is held but the current book.
INSERT INTO book_counts (book_id, pages, pages_without_image, illustrations)
SELECT b.id,
    (SELECT count(*) FROM pages p WHERE p.book_id = b.id),
    (SELECT count(*) FROM pages p INDEXED BY pages_without_image WHERE p.book_id = b.id AND p.image_unavailable = 1),
    (SELECT count(*) FROM illustrations i WHERE i.book_id = b.id AND i.removed = 0)
FROM books b;
