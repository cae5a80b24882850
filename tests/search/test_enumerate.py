"""Enumeration past the offset cap: a generated catalog of 100,100 illustrations walked by keyset cursor."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagesvc.catalog import Catalog, illustration_id, page_id
from imagesvc.search.ranking import GalleryTable, Query, rank

BOOKS, PAGES, PER_PAGE = 7, 715, 20  # 100,100 illustrations: more than offset (<= 100,000) + limit (<= 50) reach


def _generated_catalog(path: Path) -> Catalog:
    """Books, pages and illustrations written straight into the catalog tables (no images: ranking needs none)."""
    catalog = Catalog(path)
    with catalog.transaction() as conn:
        for b in range(BOOKS):
            book = f"{b:016x}"
            conn.execute(
                "INSERT INTO books (id, slug, title, author, language, institution, item_url, source_hash,"
                " ingested_at) VALUES (?, ?, 'T', 'A', 'Latin', 'I', 'https://x.example', '', '')",
                (book, f"book-{b}"),
            )
            conn.executemany(
                "INSERT INTO pages (id, book_id, number) VALUES (?, ?, ?)",
                [(page_id(book, n), book, n) for n in range(1, PAGES + 1)],
            )
            conn.executemany(
                "INSERT INTO illustrations (id, page_id, book_id, page_number, idx, bbox_x, bbox_y, bbox_w, bbox_h,"
                " type) VALUES (?, ?, ?, ?, ?, 0, 0, 1, 1, 'woodcut')",
                [
                    (illustration_id(book, n, i), page_id(book, n), book, n, i)
                    for n in range(1, PAGES + 1)
                    for i in range(PER_PAGE)
                ],
            )
    return catalog


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> GalleryTable:
    catalog = _generated_catalog(tmp_path_factory.mktemp("big") / "catalog.sqlite3")
    try:
        return GalleryTable.from_catalog(catalog)
    finally:
        catalog.close()


def test_the_cursor_walks_every_illustration_exactly_once(table: GalleryTable) -> None:
    expected = BOOKS * PAGES * PER_PAGE
    assert expected > 100_000 + 50
    seen: list[int] = []
    after = None
    while True:
        page = rank(table, Query(max_per_book=1_000_000, limit=5000, after=after))
        assert page.total == expected
        seen += page.rows
        if not page.more:
            break
        after = table.ids[page.rows[-1]]
    assert len(seen) == len(set(seen)) == expected
    assert seen == sorted(seen)  # catalog order: book, page, index


def test_pages_of_fifty_continue_past_the_offset_cap(table: GalleryTable) -> None:
    """The last pages, out of reach of offset <= 100,000 with limit <= 50, come by cursor, page after page."""
    start = table.ids[100_000 - 1]  # as if 2,000 pages of 50 had been read
    tail, after = [], start
    while after is not None:
        page = rank(table, Query(max_per_book=1_000_000, limit=50, after=after))
        tail += [table.ids[r] for r in page.rows]
        after = table.ids[page.rows[-1]] if page.more else None
    assert tail == table.ids[100_000:] and len(tail) == 100


def test_a_per_book_cap_is_counted_from_each_book_start_across_pages(table: GalleryTable) -> None:
    whole = rank(table, Query(max_per_book=30, limit=1000))
    walked, after = [], None
    while True:
        page = rank(table, Query(max_per_book=30, limit=4, after=after))
        walked += page.rows
        if not page.more:
            break
        after = table.ids[page.rows[-1]]
    assert whole.total == BOOKS * 30 == len(walked) and walked == whole.rows
