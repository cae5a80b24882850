-- 7: a page listing read off an index: get_book lists 300 pages, whose image state sits past ~5 KB of text in each
-- row. (SQLite's version also creates its full-text index of page text; PostgreSQL's page search is below.)
CREATE INDEX IF NOT EXISTS pages_listing ON pages (book_id, number, id, image_unavailable, unavailable_reason, width,
    height);
