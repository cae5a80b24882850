-- 10: what a node's gallery search state needs to follow the catalog book by book instead of reading every
-- illustration again after each write (imagesvc/search/changes.py). gallery_changes holds one row per book: the
-- sequence number of the last write that changed what the gallery table reads of it (an illustration added,
-- deleted or changed; the book's year or withdrawal; the book deleted), kept by triggers, so ingest and operator
-- writes need not know it exists. A node remembers the highest number it has read and, after a write, reads only
-- the books above it. (PostgreSQL's migration 10 also stores the illustration search vector; FTS5 needs nothing.)
CREATE TABLE gallery_changes (
    book_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL
);
CREATE INDEX gallery_changes_by_seq ON gallery_changes (seq);
CREATE TRIGGER gallery_changes_illustration_ai AFTER INSERT ON illustrations BEGIN
    INSERT INTO gallery_changes (book_id, seq) VALUES (new.book_id, (SELECT coalesce(max(seq), 0) + 1 FROM gallery_changes))
    ON CONFLICT (book_id) DO UPDATE SET seq = excluded.seq;
END;
CREATE TRIGGER gallery_changes_illustration_ad AFTER DELETE ON illustrations BEGIN
    INSERT INTO gallery_changes (book_id, seq) VALUES (old.book_id, (SELECT coalesce(max(seq), 0) + 1 FROM gallery_changes))
    ON CONFLICT (book_id) DO UPDATE SET seq = excluded.seq;
END;
CREATE TRIGGER gallery_changes_illustration_au AFTER UPDATE ON illustrations BEGIN
    INSERT INTO gallery_changes (book_id, seq) VALUES (old.book_id, (SELECT coalesce(max(seq), 0) + 1 FROM gallery_changes))
    ON CONFLICT (book_id) DO UPDATE SET seq = excluded.seq;
    INSERT INTO gallery_changes (book_id, seq) VALUES (new.book_id, (SELECT coalesce(max(seq), 0) + 1 FROM gallery_changes))
    ON CONFLICT (book_id) DO UPDATE SET seq = excluded.seq;
END;
CREATE TRIGGER gallery_changes_book_au AFTER UPDATE OF year, withdrawn ON books
WHEN old.year IS NOT new.year OR old.withdrawn IS NOT new.withdrawn BEGIN
    INSERT INTO gallery_changes (book_id, seq) VALUES (new.id, (SELECT coalesce(max(seq), 0) + 1 FROM gallery_changes))
    ON CONFLICT (book_id) DO UPDATE SET seq = excluded.seq;
END;
CREATE TRIGGER gallery_changes_book_ad AFTER DELETE ON books BEGIN
    INSERT INTO gallery_changes (book_id, seq) VALUES (old.id, (SELECT coalesce(max(seq), 0) + 1 FROM gallery_changes))
    ON CONFLICT (book_id) DO UPDATE SET seq = excluded.seq;
END;
