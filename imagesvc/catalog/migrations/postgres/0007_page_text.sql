-- 7: a page listing read off an index: get_book lists 300 pages, whose image state sits past ~5 KB of text in each
-- row. And page search (search_within_book; catalog/page_text_sql.py): where SQLite keeps an FTS5 table, PostgreSQL
-- keeps each text of a page (field 0 OCR, 1 translation, 2 original) as the distinct terms text_fold.index_terms
-- reads from it (folded in Python, so both dialects find the same pages: Hebrew points, Arabic marks, long s, CJK as
-- characters and pairs), GIN-indexed for a term rare in the library and keyed by book for a common one. An existing
-- catalog's pages are read into it by page_text_sql.build in the same transaction (schema.POSTGRES_FOLLOW_UPS).
CREATE INDEX IF NOT EXISTS pages_listing ON pages (book_id, number, id, image_unavailable, unavailable_reason, width,
    height);
CREATE TABLE IF NOT EXISTS page_texts (
    book_id TEXT NOT NULL,
    number INTEGER NOT NULL,
    field SMALLINT NOT NULL CHECK (field BETWEEN 0 AND 2),
    terms TEXT[] NOT NULL,
    PRIMARY KEY (book_id, number, field)
);
CREATE INDEX IF NOT EXISTS page_texts_terms ON page_texts USING gin (terms);
