-- 9: the catalog's functions and orders do not depend on the session or the database's locale.
-- Every function resolves names in the schema the catalog was migrated into (SET search_path FROM CURRENT), so a
-- dump restored with an empty search_path, and index upkeep under PostgreSQL 17's safe search_path, still find
-- unaccent and imagesvc_fold. The change feed's time is the time the change was written (clock_timestamp), taken
-- after the writer holds the change counter's lock, so times rise with sequence numbers. Titles are indexed in the
-- order imagesvc/catalog/library.py asks for: A-Z folded, then code points (SQLite's NOCASE), not the locale's.
ALTER FUNCTION imagesvc_fold(TEXT) SET search_path FROM CURRENT;
ALTER FUNCTION imagesvc_illustration_doc(TEXT, TEXT, TEXT, TEXT, TEXT) SET search_path FROM CURRENT;
ALTER FUNCTION imagesvc_book_doc(TEXT, TEXT) SET search_path FROM CURRENT;
ALTER FUNCTION imagesvc_log_book_change() SET search_path FROM CURRENT;
CREATE OR REPLACE FUNCTION imagesvc_now_text() RETURNS TEXT LANGUAGE SQL VOLATILE AS $$
    SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"+00:00"')
$$;
ALTER FUNCTION imagesvc_now_text() SET search_path FROM CURRENT;
DROP INDEX books_recent_translation;
DROP INDEX books_recent;
DROP INDEX books_by_title;
CREATE INDEX books_recent_translation ON books (translated_at DESC NULLS LAST,
    (translate(title, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz') COLLATE "C"), id);
CREATE INDEX books_recent ON books (ingested_at DESC NULLS LAST,
    (translate(title, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz') COLLATE "C"), id);
CREATE INDEX books_by_title ON books (
    (translate(title, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz') COLLATE "C"), id);
