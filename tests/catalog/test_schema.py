"""The catalog opens in WAL mode at the current schema and refuses files from a newer imagesvc."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from imagesvc.catalog import Catalog
from imagesvc.catalog.schema import SCHEMA_VERSION


def test_new_catalog_is_current_and_wal(tmp_path: Path) -> None:
    cat = Catalog(tmp_path / "c.sqlite3")
    try:
        assert cat.schema_version == SCHEMA_VERSION
        assert cat.counts()["books"] == 0
    finally:
        cat.close()
    conn = sqlite3.connect(tmp_path / "c.sqlite3")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()


def test_reopening_keeps_the_books_and_the_schema(tmp_path: Path) -> None:
    """A restart opens the same file: its books are still there and nothing is migrated twice."""
    cat = Catalog(tmp_path / "c.sqlite3")
    with cat.transaction() as conn:
        conn.execute(
            "INSERT INTO books (id, slug, title, author, language, institution, item_url, source_hash, ingested_at)"
            " VALUES ('01', 'kept-book', 'Kept', 'A', 'Latin', 'I', 'https://x.example', '', '')"
        )
    cat.close()
    again = Catalog(tmp_path / "c.sqlite3")  # a migration that re-ran would fail ("table books already exists")
    try:
        assert again.schema_version == SCHEMA_VERSION
        assert again.counts()["books"] == 1
        assert (again.find_book("kept-book", counts=False) or {}).get("title") == "Kept"
    finally:
        again.close()


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "c.sqlite3")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(RuntimeError, match="upgrade imagesvc"):
        Catalog(tmp_path / "c.sqlite3")


def test_a_version_3_catalog_gains_the_catalogue_fields_and_title_search(tmp_path: Path) -> None:
    """Books written before migration 4 keep their rows, get empty catalogue fields, and are found by FTS."""
    from imagesvc.catalog.library import BookFilters, query_books
    from imagesvc.catalog.schema import MIGRATIONS

    conn = sqlite3.connect(tmp_path / "c.sqlite3")
    for version in range(3):
        conn.executescript(f"BEGIN; {MIGRATIONS[version]}; PRAGMA user_version = {version + 1}; COMMIT;")
    conn.execute(
        "INSERT INTO books (id, slug, title, author, language, institution, item_url, source_hash, ingested_at)"
        " VALUES ('00', 'old-book', 'Hortus Sanitatis', 'Anonymous', 'Latin', 'I', 'https://x.example', '', '')"
    )
    conn.commit()
    conn.close()
    cat = Catalog(tmp_path / "c.sqlite3")
    try:
        rows, total = query_books(cat, BookFilters(search="hortus"), sort=None, limit=10, offset=0)
        assert total == 1 and rows[0]["slug"] == "old-book"
        assert rows[0]["edition_languages"] == [] and rows[0]["first_translation"] == 0
        assert query_books(cat, BookFilters(category="botany"), sort=None, limit=10, offset=0)[1] == 0
    finally:
        cat.close()
