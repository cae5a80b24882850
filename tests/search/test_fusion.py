"""Fusion of keyword and dense text scores, the text weight beside CLIP, ``min_score`` and each filter, on small tables
whose right answers can be worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from imagesvc.search.fusion import DENSE_FLOOR, W_FTS, fuse_rows, parse_query
from imagesvc.search.ranking import NO_YEAR, TEXT_WEIGHT, GalleryTable, Query, rank


def small() -> tuple[GalleryTable, np.ndarray]:
    """Six illustrations in two books; the vector of row r is the axis r % 3, so a query on axis 0 scores 1.0 for
    rows 0 and 3 and 0.0 for the others."""
    t = GalleryTable(
        ids=["a-1:0", "a-1:1", "a-2:0", "b-1:0", "b-1:1", "b-2:0"],
        book=np.array([0, 0, 0, 1, 1, 1], np.int32),
        book_ids=["a", "b"],
        type=np.array([0, 1, 0, 1, 0, 1], np.int32),
        types=["woodcut", "map"],
        year=np.array([1500, 1550, NO_YEAR, 1600, 1650, 1700], np.int32),
        live=np.ones(6, bool),
        group=np.full(6, -1, np.int32),
        terms={("subjects", "ship"): np.array([1, 4]), ("symbols", "anchor"): np.array([4])},
    )
    t.attach(t.ids)
    return t, np.eye(3, dtype=np.float32)[np.arange(6) % 3]


def _fuse(ids: list[str], dense: np.ndarray, fts: dict[str, float], table: list[str]) -> tuple[dict, dict]:
    """``fuse_rows`` over a table of ``table`` ids, read back as ``({id: fused}, {id: dense cosine})``."""
    where = {iid: n for n, iid in enumerate(table)}
    rows = np.array([where.get(iid, -1) for iid in ids], np.int64)
    hits = [iid for iid in fts if iid in where]
    fused = fuse_rows(
        len(table), rows, dense, np.array([where[i] for i in hits], np.int64), np.array([fts[i] for i in hits])
    )
    return (
        {table[r]: float(s) for r, s in zip(fused.rows.tolist(), fused.scores.tolist(), strict=True)},
        {table[r]: c for r in fused.rows.tolist() if (c := fused.dense_of(r)) is not None},
    )


def test_fuse_adds_the_weighted_keyword_score_to_the_cosine() -> None:
    ids = ["x", "y", "z", "w", "gone"]
    dense = np.array([0.6, 0.3, 0.1, 0.12, 0.9], np.float32)
    table = ["x", "y", "z", "w", "new", "other"]  # "gone" is in the dense index, not in the table
    fused, cos = _fuse(ids, dense, {"y": 1.0, "z": 0.5, "new": 0.5}, table)
    assert fused == pytest.approx({"x": 0.6, "y": 0.3 + W_FTS, "z": 0.1 + W_FTS * 0.5, "new": W_FTS * 0.5})
    # w is under the dense floor with no keyword match: not a result at all; z is one, through its keyword; new has
    # no dense score (a keyword match the text index has no row for yet); gone is no row of the table
    assert "w" not in fused and cos == pytest.approx({"x": 0.6, "y": 0.3, "z": 0.1}) and DENSE_FLOOR > 0.12


def test_with_no_dense_score_over_the_floor_the_keyword_matches_are_the_results() -> None:
    table = ["a", "b", "c"]
    fused, cos = _fuse(["a", "b", "c"], np.full(3, 0.01, np.float32), {"a": 1.0, "b": 0.25}, table)
    assert fused == pytest.approx({"a": 0.01 + W_FTS, "b": 0.01 + W_FTS * 0.25}) and set(cos) == {"a", "b"}


def test_negative_terms_are_split_off() -> None:
    p = parse_query('ships -map -"sea monster" at sea', exclude="Globe, compass")
    assert p.positive == "ships at sea" and p.negative == ("map", "sea monster", "globe", "compass")
    assert parse_query("-map").positive is None


def test_text_weighs_a_tenth_of_a_cosine_beside_clip() -> None:
    t, m = small()
    q = np.array([1, 0, 0], np.float32)
    r = rank(t, Query(max_per_book=10), m, q, {"b-1:1": 1.0, "a-1:0": 0.5})
    assert r.rows[:2] == [0, 3] and r.similarity[:2] == [pytest.approx(1 + TEXT_WEIGHT * 0.5), 1.0]
    assert r.rows[2] == 4 and r.similarity[2] == pytest.approx(TEXT_WEIGHT) and r.text[2] == 1.0 and r.clip[2] == 0.0
    assert r.rows[3:] == [1, 2, 5] and r.total == 6  # ties at 0.0 keep catalog order


def test_min_score_keeps_scores_at_or_over_it_and_counts_only_them() -> None:
    t, m = small()
    q = np.array([1, 0, 0], np.float32)
    r = rank(t, Query(max_per_book=10, min_score=TEXT_WEIGHT), m, q, {"b-1:1": 1.0})
    assert r.rows == [0, 3, 4] and r.total == 3 and not r.more
    only_text = rank(t, Query(max_per_book=10, min_score=0.5), None, None, {"b-1:1": 1.0, "a-2:0": 0.25})
    assert only_text.rows == [4] and only_text.total == 1


def test_text_only_ranking_drops_rows_without_a_match() -> None:
    t, _ = small()
    r = rank(t, Query(max_per_book=10), None, None, {"a-2:0": 0.25, "b-2:0": 0.25, "a-1:1": 0.75, "gone-1:0": 1.0})
    assert r.rows == [1, 2, 5] and r.clip == [None] * 3 and r.similarity == [0.75, 0.25, 0.25]


@pytest.mark.parametrize(
    ("query", "rows"),
    [
        (Query(type="map"), [1, 3, 5]),
        (Query(type="etching"), []),
        (Query(subject="Ship"), [1, 4]),
        (Query(symbol="anchor", figure=None), [4]),
        (Query(figure="saint"), []),
        (Query(year_from=1550, year_to=1650), [1, 3, 4]),
        (Query(year_to=1600), [0, 1, 3]),  # an unknown year never passes a year bound
        (Query(book_ids=("b", "nope")), [3, 4, 5]),
        (Query(in_ids=frozenset({"a-2:0", "b-2:0", "x-1:0"})), [2, 5]),
        (Query(exclude_ids=frozenset({"a-1:0", "b-1:0"})), [1, 2, 4, 5]),
        (Query(type="woodcut", exclude_ids=frozenset({"a-1:0"}), book_ids=("a",)), [2]),
    ],
)
def test_each_filter_narrows_ranked_and_unranked_results(query: Query, rows: list[int]) -> None:
    t, m = small()
    query.max_per_book = 10
    unranked = rank(t, query)
    assert unranked.rows == rows and unranked.total == len(rows)
    ranked = rank(t, query, m, np.array([0, 0, 1], np.float32))
    assert sorted(ranked.rows) == rows and ranked.total == len(rows)
    assert ranked.rows == sorted(rows, key=lambda r: (r % 3 != 2, r))  # axis 2 first, then catalog order


def fuse_by_hand(ids: list[str], dense: np.ndarray, fts: dict[str, float]) -> tuple[dict, dict]:
    """Fusion written as ``fuse_rows``'s docstring reads, one id at a time."""
    cos: dict[str, float] = {}
    for n, iid in enumerate(ids):
        if dense[n] >= DENSE_FLOOR:
            cos[iid] = float(dense[n])
    for iid in fts:
        if iid in ids and iid not in cos:
            cos[iid] = float(dense[ids.index(iid)])
    fused = {iid: c + W_FTS * fts.get(iid, 0.0) for iid, c in cos.items()}
    for iid, s in fts.items():
        fused.setdefault(iid, W_FTS * s)
    return fused, cos


@pytest.mark.parametrize("seed", range(4))
def test_fuse_matches_a_plain_loop_to_the_last_bit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    ids = [f"x-{k}:0" for k in range(3000)]
    dense = rng.uniform(-0.1, 0.6, len(ids)).astype(np.float32)
    dense[rng.choice(len(ids), 100)] = DENSE_FLOOR  # exactly at the floor: kept
    picked = rng.choice(len(ids), 400, replace=False)
    fts = {ids[n]: float(rng.choice([1.0, 0.5, rng.random()])) for n in picked} | {"new-1:0": 0.75}
    table = [*rng.permutation(ids).tolist(), "new-1:0"]  # the table's order is not the dense index's
    fused, cos = _fuse(ids, dense, fts, table)
    want = fuse_by_hand(ids, dense, fts)
    # every value equal, not approximately, once in float32 as rank reads it (each match's sum taken in float64)
    assert fused == {iid: float(np.float32(v)) for iid, v in want[0].items()} and cos == want[1]


def test_an_engine_page_reports_each_result_s_dense_and_keyword_scores_only() -> None:
    """``Fused.dense_of``: a row that is not a result has no dense score to show, even where the index has one."""
    fused = fuse_rows(3, np.array([0, 1, 2]), np.array([0.5, 0.01, 0.02], np.float32), np.array([2]), np.array([1.0]))
    assert fused.rows.tolist() == [0, 2] and fused.dense_of(1) is None
    assert fused.dense_of(0) == pytest.approx(0.5) and fused.dense_of(2) == pytest.approx(0.02)
