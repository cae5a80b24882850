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


def test_reopening_does_not_migrate_again(tmp_path: Path) -> None:
    Catalog(tmp_path / "c.sqlite3").close()
    Catalog(tmp_path / "c.sqlite3").close()  # would fail with "table books already exists" if it re-ran


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "c.sqlite3")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(RuntimeError, match="upgrade imagesvc"):
        Catalog(tmp_path / "c.sqlite3")
