-- 4: what the catalogue filters of /books/library need (category, book collection, work, edition key, first
-- translation, languages the book can be read in, translation date), and full text over titles and authors.
-- SQLite's NOCASE orders become lower(); its NULLs-first ascending order becomes explicit NULLS LAST on DESC.
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
CREATE INDEX pages_translated ON pages (book_id) WHERE translation IS NOT NULL;
CREATE INDEX books_by_institution ON books (institution);
CREATE INDEX books_recent_translation ON books (translated_at DESC NULLS LAST, lower(title), id);
CREATE INDEX books_recent ON books (ingested_at DESC NULLS LAST, lower(title), id);
CREATE INDEX books_by_title ON books (lower(title), id);
CREATE FUNCTION imagesvc_book_doc(title TEXT, author TEXT) RETURNS tsvector
    LANGUAGE SQL IMMUTABLE PARALLEL SAFE AS $$
    SELECT to_tsvector('simple'::regconfig, imagesvc_fold(coalesce(title, '') || ' ' || coalesce(author, '')))
$$;
CREATE INDEX books_search ON books USING gin (imagesvc_book_doc(title, author));
