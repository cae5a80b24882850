"""Fusion of keyword and dense text scores, the text weight beside CLIP, ``min_score`` and each filter, on small tables
whose right answers can be worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from imagesvc.search.fusion import DENSE_FLOOR, W_FTS, fuse, parse_query
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


def test_fuse_adds_the_weighted_keyword_score_to_the_cosine() -> None:
    ids = ["x", "y", "z", "w"]
    dense = np.array([0.6, 0.3, 0.1, 0.12], np.float32)
    fused, cos = fuse(ids, dense, {"y": 1.0, "z": 0.5, "new": 0.5})
    assert fused == pytest.approx({"x": 0.6, "y": 0.3 + W_FTS, "z": 0.1 + W_FTS * 0.5, "new": W_FTS * 0.5})
    # w is under the dense floor with no keyword match: not a result at all; z is one, through its keyword.
    assert "w" not in fused and set(cos) == {"x", "y", "z"} and DENSE_FLOOR > 0.12


def test_fuse_without_dense_scores_is_the_keyword_ranking() -> None:
    assert fuse([], None, {"a": 1.0, "b": 0.25}) == ({"a": 1.0, "b": 0.25}, {})


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
    """``fuse`` written as its docstring reads, one id at a time."""
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
    for _ in range(2):  # the second call reuses the id positions of the first
        fused, cos = fuse(ids, dense, fts)
        want = fuse_by_hand(ids, dense, fts)
        assert list(fused.items()) == list(want[0].items()) and list(cos.items()) == list(want[1].items())
    other = ids[::-1]  # another index's ids: positions are not reused
    assert list(fuse(other, dense, fts)[1].items()) == list(fuse_by_hand(other, dense, fts)[1].items())
