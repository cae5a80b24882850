-- 1: books, pages, renditions, illustrations, collections (the PostgreSQL form of sqlite/0001: flags stay integers
-- 0/1 and JSON columns stay text, so rows read the same from both backends).
CREATE TABLE books (
    id TEXT PRIMARY KEY,
    slug TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL,
    author TEXT NOT NULL,
    author_id TEXT,
    language TEXT NOT NULL,
    year INTEGER,
    doi TEXT,
    translator TEXT,
    summary TEXT,
    chapters TEXT NOT NULL DEFAULT '[]',
    edition TEXT NOT NULL DEFAULT '{}',
    viewing_direction TEXT NOT NULL DEFAULT 'left-to-right',
    license TEXT,
    institution TEXT NOT NULL,
    institution_url TEXT,
    item_url TEXT NOT NULL,
    withdrawn INTEGER NOT NULL DEFAULT 0,
    source_hash TEXT NOT NULL,
    ingested_at TEXT NOT NULL
);
CREATE TABLE pages (
    id TEXT PRIMARY KEY,
    book_id TEXT NOT NULL REFERENCES books(id) ON DELETE CASCADE,
    number INTEGER NOT NULL,
    ocr TEXT,
    translation TEXT,
    original TEXT,
    image_unavailable INTEGER NOT NULL DEFAULT 0,
    unavailable_reason TEXT,
    master_key TEXT,
    master_sha256 TEXT,
    master_format TEXT,
    derivation TEXT,
    width INTEGER,
    height INTEGER,
    UNIQUE (book_id, number)
);
CREATE TABLE renditions (
    owner TEXT NOT NULL,
    tier TEXT NOT NULL,
    clean_key TEXT NOT NULL,
    public_key TEXT NOT NULL,
    width INTEGER NOT NULL,
    height INTEGER NOT NULL,
    bytes BIGINT NOT NULL,
    sha256 TEXT NOT NULL,
    PRIMARY KEY (owner, tier)
);
CREATE TABLE illustrations (
    id TEXT PRIMARY KEY,
    page_id TEXT NOT NULL REFERENCES pages(id) ON DELETE CASCADE,
    book_id TEXT NOT NULL REFERENCES books(id) ON DELETE CASCADE,
    page_number INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    bbox_x DOUBLE PRECISION NOT NULL, bbox_y DOUBLE PRECISION NOT NULL,
    bbox_w DOUBLE PRECISION NOT NULL, bbox_h DOUBLE PRECISION NOT NULL,
    type TEXT NOT NULL,
    description TEXT,
    museum_description TEXT,
    subjects TEXT NOT NULL DEFAULT '[]',
    figures TEXT NOT NULL DEFAULT '[]',
    symbols TEXT NOT NULL DEFAULT '[]',
    year INTEGER,
    phash TEXT,
    dhash TEXT,
    content_sha256 TEXT,
    removed INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX illustrations_by_book ON illustrations (book_id, page_number, idx);
CREATE TABLE collections (
    slug TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    description TEXT,
    cover_id TEXT,
    featured INTEGER NOT NULL DEFAULT 0,
    position INTEGER NOT NULL
);
CREATE TABLE collection_items (
    slug TEXT NOT NULL REFERENCES collections(slug) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    illustration_id TEXT NOT NULL,
    PRIMARY KEY (slug, position)
);
