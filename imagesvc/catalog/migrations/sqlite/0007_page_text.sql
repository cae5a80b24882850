-- 7: full text over every page's OCR, translation and original (search_within_book; catalog/page_text.py), filled
-- for an existing catalog by page_text.build in the same transaction (schema.FOLLOW_UPS). And a page listing read
-- off an index: get_book lists 300 pages, whose image state sits past ~5 KB of text in each row (the table read took
-- 10-12 ms a book at 45,000 pages; this index, 1-3 ms).
CREATE TABLE IF NOT EXISTS page_text_books (
    n INTEGER PRIMARY KEY,  -- stable across VACUUM, unlike an implicit rowid
    book_id TEXT NOT NULL UNIQUE
);
CREATE VIRTUAL TABLE IF NOT EXISTS pages_fts USING fts5(
    text, content='', tokenize='unicode61 remove_diacritics 2'
);
CREATE INDEX IF NOT EXISTS pages_listing ON pages (book_id, number, id, image_unavailable, unavailable_reason, width,
    height);
