-- 5: what a catalog of millions of pages needs. Ingest replaces a page's illustrations by page_id (without an index,
-- every page written scanned the whole illustrations table); /health counts the pages without an image from a
-- partial index instead of reading every page row past its text.
CREATE INDEX illustrations_by_page ON illustrations (page_id);
CREATE INDEX pages_without_image ON pages (book_id, image_unavailable) WHERE image_unavailable = 1;
