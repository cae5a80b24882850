"""The keyset-paged dataset listing at the catalog: a page deep in the library costs what the first page costs, so a
harvester walking every page of 4.5 million does not make each request slower than the one before."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from imagesvc.catalog import Catalog
from imagesvc.catalog.dataset import dataset_pages

BOOKS, PAGES = 200, 50


class CountingReads:
    """The catalog's read interface over a plain connection that counts SQLite virtual-machine steps (a measure of
    the work a query does that does not depend on the machine's speed or load)."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path)
        self.conn.row_factory = sqlite3.Row
        self.steps = 0
        self.conn.set_progress_handler(self._tick, 100)

    def _tick(self) -> int:
        self.steps += 1
        return 0

    def query_all(self, sql: str, args: Any = ()) -> list[dict[str, Any]]:
        return [dict(row) for row in self.conn.execute(sql, tuple(args))]


@pytest.fixture
def library(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.sqlite3"
    Catalog(path).close()  # the schema, migrated
    with sqlite3.connect(path) as conn:
        conn.executemany(
            "INSERT INTO books (id, slug, title, author, language, chapters, edition, viewing_direction, institution,"
            " item_url, withdrawn, source_hash, ingested_at, first_translation, edition_languages) VALUES (?, ?, 't',"
            " 'a', 'la', '[]', '{}', 'left-to-right', 'i', 'u', 0, 'h', '2026-11-26', 0, '[]')",
            [(f"{b:016x}", f"book-{b}") for b in range(BOOKS)],
        )
        conn.executemany(
            "INSERT INTO pages (id, book_id, number, image_unavailable) VALUES (?, ?, ?, 0)",
            [(f"{b:016x}-{p}", f"{b:016x}", p) for b in range(BOOKS) for p in range(1, PAGES + 1)],
        )
    return path


def test_a_page_deep_in_the_listing_costs_what_the_first_costs(library: Path) -> None:
    reads = CountingReads(library)
    first = dataset_pages(reads, (f"{1:016x}", 10), 101, None)
    early, reads.steps = reads.steps, 0
    late = dataset_pages(reads, (f"{BOOKS - 3:016x}", 10), 101, None)
    assert [r["number"] for r in first[:2]] == [11, 12] and [r["number"] for r in late[:2]] == [11, 12]
    assert len(first) == len(late) == 101
    assert reads.steps <= 3 * max(early, 1), (early, reads.steps)  # an index range, not a walk from the start
