-- 9: nothing to change in SQLite, whose functions, orders and change log already behave as migration 9 makes them
-- behave in PostgreSQL (there: functions independent of the session's search_path, the change feed's times those of
-- the writes, title indexes in NOCASE order). The number is shared by both dialects.
SELECT 1;
