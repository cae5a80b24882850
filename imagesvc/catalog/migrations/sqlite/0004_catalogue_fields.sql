-- 4: what the catalogue filters of /books/library need (category, book collection, work, edition key, first
-- translation, languages the book can be read in, translation date), and full text over titles and authors.
ALTER TABLE books ADD COLUMN category TEXT;
ALTER TABLE books ADD COLUMN collection TEXT;
ALTER TABLE books ADD COLUMN work_id TEXT;
ALTER TABLE books ADD COLUMN edition_key TEXT;
ALTER TABLE books ADD COLUMN first_translation INTEGER NOT NULL DEFAULT 0;
ALTER TABLE books ADD COLUMN edition_languages TEXT NOT NULL DEFAULT '[]';
ALTER TABLE books ADD COLUMN translated_at TEXT;
CREATE INDEX books_by_author ON books (author_id);
CREATE INDEX books_by_work ON books (work_id);
CREATE INDEX books_by_edition_key ON books (edition_key);
CREATE INDEX pages_translated ON pages (book_id) WHERE translation IS NOT NULL;  -- progress, has_translation
CREATE INDEX books_by_institution ON books (institution);
-- The browse orders, so that a page of 50 is read off an index instead of sorting every book:
CREATE INDEX books_recent_translation ON books (translated_at DESC, title COLLATE NOCASE, id);
CREATE INDEX books_recent ON books (ingested_at DESC, title COLLATE NOCASE, id);
CREATE INDEX books_by_title ON books (title COLLATE NOCASE, id);
CREATE VIRTUAL TABLE books_fts USING fts5(
    title, author, content='books', content_rowid='rowid', tokenize='unicode61 remove_diacritics 2'
);
CREATE TRIGGER books_fts_ai AFTER INSERT ON books BEGIN
    INSERT INTO books_fts (rowid, title, author) VALUES (new.rowid, new.title, new.author);
END;
CREATE TRIGGER books_fts_ad AFTER DELETE ON books BEGIN
    INSERT INTO books_fts (books_fts, rowid, title, author) VALUES ('delete', old.rowid, old.title, old.author);
END;
CREATE TRIGGER books_fts_au AFTER UPDATE OF title, author ON books BEGIN
    INSERT INTO books_fts (books_fts, rowid, title, author) VALUES ('delete', old.rowid, old.title, old.author);
    INSERT INTO books_fts (rowid, title, author) VALUES (new.rowid, new.title, new.author);
END;
INSERT INTO books_fts (books_fts) VALUES ('rebuild');
