"""``rank()`` against a brute-force ranking written in plain Python, over random tables of 60,000 illustrations.

The tables are big enough that ranking takes its large-table path (a partial sort of the best candidates that grows
when per-book caps, folding or filters use them up). Vector entries are small multiples of 1/8, so every score is
exact in float32 whatever order a matrix product adds in, and ties are frequent.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest

from imagesvc.search import ranking
from imagesvc.search.ranking import NO_YEAR, TEXT_WEIGHT, GalleryTable, Query, rank

ROWS = 60_000
BOOKS = 37


@dataclass
class World:
    table: GalleryTable
    matrix: np.ndarray
    vectors: list[np.ndarray]
    text: list[dict[str, float]]


def make_world(seed: int, rows: int = ROWS, books: int = BOOKS) -> World:
    rng = np.random.default_rng(seed)
    book = np.sort(rng.integers(0, books, rows)).astype(np.int32)
    ids, page = [], 0
    for r in range(rows):
        page = 1 if r == 0 or book[r] != book[r - 1] else page + int(rng.integers(0, 2))
        ids.append(f"bk{book[r]:03d}-{page}:{r}")
    group = np.full(rows, -1, np.int32)
    members = rng.choice(rows, 6_000, replace=False)
    group[members] = rng.integers(0, 2_000, len(members))  # about three to a group, often across books
    table = GalleryTable(
        ids=ids,
        book=book,
        book_ids=[f"bk{b:03d}" for b in range(books)],
        type=rng.integers(0, 3, rows).astype(np.int32),
        types=["woodcut", "map", "initial"],
        year=np.where(rng.random(rows) < 0.1, NO_YEAR, rng.integers(1450, 1800, rows)).astype(np.int32),
        live=rng.random(rows) > 0.03,
        group=group,
        terms={
            ("subjects", "ship"): np.flatnonzero(rng.random(rows) < 0.3),
            ("figures", "saint"): np.flatnonzero(rng.random(rows) < 0.05),
        },
    )
    # The vector index holds most illustrations, in an order of its own, plus rows for ids the table lacks.
    held = rng.permutation(np.flatnonzero(rng.random(rows) > 0.04))
    index_ids = [ids[r] for r in held] + [f"zz-1:{k}" for k in range(50)]
    table.attach(rng.permutation(index_ids).tolist())
    matrix = (rng.integers(-4, 5, (len(index_ids), 8)) / 8).astype(np.float32)
    boost = np.flatnonzero(book == 5)  # one book owns the best scores: its cap empties the first cut
    has_vec = table.vec_row[boost] >= 0
    matrix[table.vec_row[boost[has_vec]], 0] = 4.0
    vectors = [(rng.integers(-4, 5, 8) / 8).astype(np.float32) for _ in range(3)]
    vectors[0][0] = 4.0
    vectors.append(np.eye(8, dtype=np.float32)[1])  # nine score levels: thousands of rows tie at any cut
    levels = [1.0, 0.5, 0.25, 0.125]
    text = [
        {ids[r]: levels[int(rng.integers(0, 4))] for r in rng.choice(rows, size, replace=False)}
        for size in (40_000, 300)
    ]
    text[0]["nobody-1:0"] = 1.0  # a match the table does not know
    return World(table, matrix, vectors, text)


def reference(t: GalleryTable, q: Query, matrix: Any, vector: Any, text_scores: Any) -> dict[str, Any]:
    """The page ``rank`` should return: test every row, sort the whole list once, walk it."""
    ok = t.live.copy()
    if q.type is not None:
        ok &= np.array([t.types[c] == q.type for c in t.type.tolist()])
    for name, value in (("subjects", q.subject), ("figures", q.figure)):
        if value is not None:
            ok &= np.isin(np.arange(len(t)), t.terms.get((name, value.casefold()), []))
    if q.year_from is not None:
        ok &= (t.year != NO_YEAR) & (t.year >= q.year_from)
    if q.year_to is not None:
        ok &= (t.year != NO_YEAR) & (t.year <= q.year_to)
    if q.book_ids is not None:
        ok &= np.array([t.book_ids[b] in q.book_ids for b in t.book.tolist()])
    if q.in_ids is not None:
        ok &= np.array([iid in q.in_ids for iid in t.ids])
    if q.exclude_ids:
        ok &= np.array([iid not in q.exclude_ids for iid in t.ids])
    if vector is not None:
        ok &= t.vec_row >= 0
    by_id = {iid: r for r, iid in enumerate(t.ids)}
    text = np.zeros(len(t), np.float32)
    for iid, s in (text_scores or {}).items():
        if iid in by_id:
            text[by_id[iid]] = s
    clip = np.zeros(len(t), np.float32)
    if vector is not None:
        clip[ok] = (matrix @ vector)[t.vec_row[ok]]
    elif text_scores is not None:
        ok &= text > 0
    score: Any = None
    if vector is not None:
        score = clip + TEXT_WEIGHT * text if text_scores is not None else clip
    elif text_scores is not None:
        score = text
    if score is not None and q.min_score is not None:
        ok &= score >= q.min_score
    rows = np.flatnonzero(ok).tolist()
    if score is not None:
        neg = (-score).tolist()
        rows.sort(key=lambda r: (neg[r], r))
    group, book = t.group.tolist(), t.book.tolist()
    members: dict[int, list[int]] = {}
    for r in rows:
        if group[r] >= 0:
            members.setdefault(group[r], []).append(r)
    if q.fold_duplicates:
        rows = [r for r in rows if group[r] < 0 or members[group[r]][0] == r]
    seen: dict[int, int] = {}
    kept = []
    for r in rows:
        seen[book[r]] = seen.get(book[r], 0) + 1
        if seen[book[r]] <= q.max_per_book:
            kept.append(r)
    total = len(kept)
    if q.after is not None:
        start = by_id[q.after] + 1 if q.after in by_id else len(t)  # tests use known ids or ones past every row
        kept = [r for r in kept if r >= start]
    page = kept[q.offset : q.offset + q.limit]
    more = len(kept) > q.offset + q.limit if q.after is not None else q.offset + len(page) < total

    def values(arr: Any) -> list:
        return [None if arr is None else round(float(arr[r]), 6) for r in page]

    return {
        "rows": page,
        "total": total,
        "more": more,
        "similarity": values(score),
        "clip": values(clip if vector is not None else None),
        "text": values(text if text_scores is not None else None),
        "duplicates": [[m for m in members.get(group[r], []) if m != r] for r in page],
    }


def got(t: GalleryTable, q: Query, matrix: Any, vector: Any, text_scores: Any) -> dict[str, Any]:
    r = rank(t, q, matrix, vector, text_scores)
    return {k: getattr(r, k) for k in ("rows", "total", "more", "similarity", "clip", "text", "duplicates")}


@pytest.fixture(scope="module")
def world() -> World:
    return make_world(7)


FILTERS = [
    Query(),
    Query(type="map"),
    Query(type="engraving"),  # no such type: nothing
    Query(subject="SHIP", year_from=1500, year_to=1700),
    Query(figure="saint", book_ids=("bk005", "bk011", "nope")),
    Query(book_ids=("bk005",)),
    Query(year_to=1460),
]
SHAPES = [
    dict(max_per_book=3, limit=20),
    dict(max_per_book=1, limit=50, offset=10),
    dict(max_per_book=1000, limit=7, offset=993),
    dict(max_per_book=2, limit=20, offset=40, fold_duplicates=True),
    dict(max_per_book=5, limit=30, min_score=0.5),
    dict(max_per_book=40, limit=50, offset=150, fold_duplicates=True, min_score=-0.25),
]


def check(w: World, q: Query, vector: Any, text_scores: Any) -> None:
    assert got(w.table, q, w.matrix if vector is not None else None, vector, text_scores) == reference(
        w.table, q, w.matrix, vector, text_scores
    ), q


@pytest.mark.parametrize("f", range(len(FILTERS)))
def test_ranking_by_likeness_matches_a_full_sort(world: World, f: int) -> None:
    for s, shape in enumerate(SHAPES):
        vector = world.vectors[(f + s) % len(world.vectors)]
        check(world, replace(FILTERS[f], **shape), vector, None)


@pytest.mark.parametrize("text", [0, 1])
def test_text_and_fused_rankings_match_a_full_sort(world: World, text: int) -> None:
    scores = world.text[text]
    for s, shape in enumerate(SHAPES):
        check(world, Query(**shape), None, scores)
        check(world, replace(FILTERS[s % len(FILTERS)], **shape), world.vectors[s % 3], scores)


def test_exclusions_and_collections_match_a_full_sort(world: World) -> None:
    rng = np.random.default_rng(3)
    ids = world.table.ids
    best = rank(world.table, Query(max_per_book=1000, limit=500), world.matrix, world.vectors[0]).rows
    excluded = frozenset([ids[r] for r in best[:400]] + [ids[r] for r in rng.choice(len(ids), 2000)] + ["x-1:1"])
    members = frozenset(ids[r] for r in rng.choice(len(ids), 5000, replace=False))
    for shape in SHAPES:
        check(world, Query(exclude_ids=excluded, **shape), world.vectors[0], None)
        check(world, Query(in_ids=members, exclude_ids=excluded, **shape), world.vectors[1], world.text[1])


def test_every_page_of_a_ranking_matches_a_full_sort(world: World) -> None:
    """Paging by offset through a capped ranking: the pages join into the reference's list, with no gap."""
    q = Query(max_per_book=2, limit=25, fold_duplicates=True)
    whole = reference(world.table, replace(q, limit=10_000), world.matrix, world.vectors[0], None)
    assert len(whole["rows"]) == whole["total"] == 2 * BOOKS
    pages = [got(world.table, replace(q, offset=o), world.matrix, world.vectors[0], None) for o in range(0, 75, 25)]
    assert [r for p in pages for r in p["rows"]] == whole["rows"]
    assert [p["more"] for p in pages] == [True, True, False]


def test_unranked_listing_and_cursor_match_a_full_sort(world: World) -> None:
    ids = world.table.ids
    for shape in SHAPES:
        check(world, Query(**shape), None, None)
        check(world, Query(after=ids[31_337], **shape), None, None)
        check(world, replace(FILTERS[3], after=ids[100], **shape), None, None)
    check(world, Query(after="zzz-9:9", limit=5), None, None)  # past the last row: an empty page


def test_the_large_table_path_is_taken(world: World) -> None:
    """The cases above rank far more candidates than the first cut of the partial sort, and one book holds the best
    scores, so a capped page needs the cut to grow."""
    first_cut = max(4 * 20, ranking.FIRST_CUT)
    assert len(world.table) >= 50_000 and int(world.table.live.sum()) > 40 * first_cut
    top = rank(world.table, Query(max_per_book=1000, limit=first_cut), world.matrix, world.vectors[0])
    assert {world.table.book[r] for r in top.rows} == {5}  # the whole first cut is one book's
    capped = rank(world.table, Query(max_per_book=3, limit=20), world.matrix, world.vectors[0])
    assert len({world.table.book[r] for r in capped.rows}) > 1


@pytest.mark.parametrize("f", [0, 1])
def test_ties_across_the_first_cut_keep_catalog_order(world: World, f: int) -> None:
    """Thousands of rows share the best score, so the first cut splits a tie: the page must still be the tied rows
    that come first in the catalog, with each book's cap counted in that order."""
    vector = world.vectors[3]
    scores = world.matrix[world.table.vec_row[world.table.vec_row >= 0]] @ vector
    assert np.count_nonzero(scores == scores.max()) > 4 * ranking.FIRST_CUT
    for shape in SHAPES:
        check(world, replace(FILTERS[f], **shape), vector, None)


def test_edges_match_a_full_sort(world: World) -> None:
    """Nothing left to rank, a page past the end, a threshold no score reaches, and a matrix no row of which is live."""
    everything = frozenset(world.table.ids)
    for q in [
        Query(exclude_ids=everything),
        Query(min_score=1e9),
        Query(min_score=float("nan")),
        Query(offset=5_000, limit=50),
        Query(max_per_book=1, limit=50, offset=30),
    ]:
        for vector in (world.vectors[0], world.vectors[3]):
            check(world, q, vector, None)
    t = replace(world.table, live=np.zeros(len(world.table), bool), _prepared=None)
    assert rank(t, Query(), world.matrix, world.vectors[0]).total == 0


def test_a_table_copied_with_other_columns_is_not_ranked_with_the_old_ones(world: World) -> None:
    rank(world.table, Query(), world.matrix, world.vectors[0])  # the world's arrays are built
    for column in ("live", "book", "group"):
        with pytest.raises(ValueError, match="read-only"):  # a ranked table's columns cannot change under it
            getattr(world.table, column)[0] = 0
    t = replace(world.table, book=np.zeros(len(world.table), np.int32))  # one book now
    assert rank(t, Query(max_per_book=2), world.matrix, world.vectors[0]).total == 2
    check(World(t, world.matrix, world.vectors, world.text), Query(max_per_book=5), world.vectors[1], None)
