-- 14: a public tier may be larger than its clean copy (a mark strip added below a page whose content leaves no free
-- margin), so each rendition keeps the clean copy's pixel size too. NULL: the same as width and height.
ALTER TABLE renditions ADD COLUMN clean_width INTEGER;
ALTER TABLE renditions ADD COLUMN clean_height INTEGER;
