"""Ranking over a synthetic table: duplicates folded, per-book caps, exact totals and paging."""

from __future__ import annotations

import numpy as np

from imagesvc.search.ranking import GalleryTable, Query, rank


def table(n: int = 40, books: int = 4, seed: int = 1) -> tuple[GalleryTable, np.ndarray]:
    rng = np.random.default_rng(seed)
    matrix = rng.normal(size=(n, 16)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    t = GalleryTable(
        ids=[f"i{k:03d}" for k in range(n)],
        book=(np.arange(n) % books).astype(np.int32),
        book_ids=[f"b{k}" for k in range(books)],
        type=(np.arange(n) % 2).astype(np.int32),
        types=["woodcut", "map"],
        year=np.full(n, 1600, np.int32),
        live=np.ones(n, bool),
        group=np.full(n, -1, np.int32),
    )
    t.attach(t.ids)
    return t, matrix


def test_near_duplicates_fold_into_the_best_scored_one() -> None:
    t, m = table()
    t.group[[3, 7, 11]] = 0
    r = rank(t, Query(like="i003", max_per_book=1000, limit=50, fold_duplicates=True), m, m[3])
    assert r.rows[0] == 3 and r.duplicates[0] == [7, 11]
    assert 7 not in r.rows and 11 not in r.rows and r.total == 38


def test_paging_matches_one_big_page_under_caps() -> None:
    t, m = table(n=400, books=7)
    q = m[5] + 0.1
    whole = rank(t, Query(max_per_book=9, limit=1000), m, q)
    assert whole.total == len(whole.rows) == 7 * 9
    pieces = [
        row for o in range(0, whole.total, 10) for row in rank(t, Query(max_per_book=9, limit=10, offset=o), m, q).rows
    ]
    assert pieces == whole.rows


def test_removed_rows_never_rank() -> None:
    t, m = table()
    t.live[3] = False
    r = rank(t, Query(max_per_book=1000, limit=50), m, m[3])
    assert 3 not in r.rows and r.total == 39
