"""The catalog's SQLite schema as an ordered list of migrations, applied by ``PRAGMA user_version``."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from imagesvc.catalog import page_text

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "migrate"]

PAGE_LISTING = """
CREATE INDEX IF NOT EXISTS pages_listing ON pages (book_id, number, id, image_unavailable, unavailable_reason, width,
    height);
"""

MIGRATIONS: tuple[str, ...] = (
    # 1: books, pages, renditions, illustrations, collections.
    """
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
        bytes INTEGER NOT NULL,
        sha256 TEXT NOT NULL,
        PRIMARY KEY (owner, tier)
    );
    CREATE TABLE illustrations (
        id TEXT PRIMARY KEY,
        page_id TEXT NOT NULL REFERENCES pages(id) ON DELETE CASCADE,
        book_id TEXT NOT NULL REFERENCES books(id) ON DELETE CASCADE,
        page_number INTEGER NOT NULL,
        idx INTEGER NOT NULL,
        bbox_x REAL NOT NULL, bbox_y REAL NOT NULL, bbox_w REAL NOT NULL, bbox_h REAL NOT NULL,
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
    """,
    # 2: API keys, stored only as hashes; the id is the key's public, non-secret reference.
    """
    CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        secret_hash TEXT NOT NULL UNIQUE,
        tier TEXT NOT NULL,
        label TEXT NOT NULL DEFAULT '',
        created_at TEXT NOT NULL,
        expires_at TEXT,
        revoked_at TEXT
    );
    """,
    # 3: full-text search over illustrations (external content: the FTS table stores only its index), kept in step
    # with the illustrations table by triggers, so ingest and operator writes need not know it exists.
    """
    CREATE VIRTUAL TABLE illustrations_fts USING fts5(
        description, museum_description, subjects, figures, symbols,
        content='illustrations', content_rowid='rowid', tokenize='unicode61 remove_diacritics 2'
    );
    CREATE TRIGGER illustrations_fts_ai AFTER INSERT ON illustrations BEGIN
        INSERT INTO illustrations_fts (rowid, description, museum_description, subjects, figures, symbols)
        VALUES (new.rowid, new.description, new.museum_description, new.subjects, new.figures, new.symbols);
    END;
    CREATE TRIGGER illustrations_fts_ad AFTER DELETE ON illustrations BEGIN
        INSERT INTO illustrations_fts (illustrations_fts, rowid, description, museum_description, subjects, figures,
            symbols)
        VALUES ('delete', old.rowid, old.description, old.museum_description, old.subjects, old.figures, old.symbols);
    END;
    CREATE TRIGGER illustrations_fts_au AFTER UPDATE OF description, museum_description, subjects, figures, symbols
    ON illustrations BEGIN
        INSERT INTO illustrations_fts (illustrations_fts, rowid, description, museum_description, subjects, figures,
            symbols)
        VALUES ('delete', old.rowid, old.description, old.museum_description, old.subjects, old.figures, old.symbols);
        INSERT INTO illustrations_fts (rowid, description, museum_description, subjects, figures, symbols)
        VALUES (new.rowid, new.description, new.museum_description, new.subjects, new.figures, new.symbols);
    END;
    INSERT INTO illustrations_fts (illustrations_fts) VALUES ('rebuild');
    """,
    # 4: what the catalogue filters of /books/library need (category, book collection, work, edition key, first
    # translation, languages the book can be read in, translation date), and full text over titles and authors.
    """
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
    """,
    # 5: full text over every page's OCR, translation and original (search_within_book); see catalog/page_text.py.
    # And a page listing read off an index: get_book lists 300 pages, whose image state sits past ~5 KB of text in
    # each row (the table read 10-12 ms a book at 45,000 pages; this index, 1-3 ms).
    page_text.MIGRATION + PAGE_LISTING,
)

SCHEMA_VERSION = len(MIGRATIONS)

# Work a migration needs beyond SQL, run in the same transaction, by the version it brings the catalog to: an
# existing catalog's pages are indexed when it gains the page index (the text is folded in Python).
FOLLOW_UPS: dict[int, Callable[[sqlite3.Connection], object]] = {5: page_text.build}


def migrate(conn: sqlite3.Connection) -> int:
    """Apply every migration newer than the file's ``user_version``; returns the version reached.

    A catalog written by a newer imagesvc is refused rather than silently misread.
    """
    current = conn.execute("PRAGMA user_version").fetchone()[0]
    if current > SCHEMA_VERSION:
        raise RuntimeError(
            f"the catalog has schema version {current}, newer than this imagesvc knows ({SCHEMA_VERSION}); "
            "upgrade imagesvc"
        )
    for version in range(current, SCHEMA_VERSION):
        follow_up = FOLLOW_UPS.get(version + 1)
        if follow_up is None:
            conn.executescript(f"BEGIN; {MIGRATIONS[version]}; PRAGMA user_version = {version + 1}; COMMIT;")
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _statements(MIGRATIONS[version]):
                conn.execute(statement)
            follow_up(conn)
            conn.execute(f"PRAGMA user_version = {version + 1}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return SCHEMA_VERSION


def _statements(script: str) -> list[str]:
    """A migration script's statements, one by one (``executescript`` would commit the open transaction)."""
    out, pending = [], ""
    for line in script.splitlines(keepends=True):
        pending += line.split("--", 1)[0] + "\n"
        if sqlite3.complete_statement(pending):
            out.append(pending.strip())
            pending = ""
    return [s for s in out if s.strip(" ;\n")]
