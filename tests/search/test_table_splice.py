"""The pieces a gallery table is spliced from when books change (``search/changes.py``, ``search/table_index.py``),
against the plain numpy reading of each, on seeded random changes: rows removed in runs and fresh rows inserted."""

from __future__ import annotations

import numpy as np
import pytest

from imagesvc.search.changes import _spliced
from imagesvc.search.table_index import Postings, RowIndex


def _change(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows kept (whole runs removed, as books are), where fresh rows go among them, their new rows, and each old
    row's new row (-1: removed)."""
    gone = np.zeros(n, bool)
    for _ in range(int(rng.integers(0, 4))):
        start = int(rng.integers(0, n))
        gone[start : start + int(rng.integers(1, 12))] = True
    kept = np.flatnonzero(~gone)
    at = np.sort(rng.integers(0, len(kept) + 1, int(rng.integers(0, 15))))
    fresh_at = at + np.arange(len(at))
    is_fresh = np.zeros(len(kept) + len(at), bool)
    is_fresh[fresh_at] = True
    old_at = np.full(n, -1, np.int64)
    old_at[kept] = np.flatnonzero(~is_fresh)
    return kept, at, fresh_at, old_at


@pytest.mark.parametrize("seed", range(30))
def test_a_spliced_list_is_numpys_insert_of_the_kept_items(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    old = [f"i{k}" for k in range(n)]
    kept, at, _, _ = _change(rng, n)
    fresh = [f"f{k}" for k in range(len(at))]
    expected = np.insert(np.array(old, dtype=object)[kept], at, np.array(fresh, dtype=object)).tolist()
    assert _spliced(old, kept, at, fresh) == expected


@pytest.mark.parametrize("seed", range(30))
def test_moved_look_ups_are_the_look_ups_of_the_new_rows(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    ids = [f"i{k}" for k in range(n)]
    terms = {
        ("subjects", f"t{k}"): rng.choice(n, min(n, int(rng.integers(1, 6))), replace=False).tolist() for k in range(8)
    }
    kept, at, fresh_at, old_at = _change(rng, n)
    removed_ids = [ids[r] for r in np.flatnonzero(old_at < 0)]
    fresh_ids = [removed_ids.pop() if removed_ids and rng.random() < 0.5 else f"f{k}" for k in range(len(at))]
    fresh_terms: dict[tuple[str, str], list[int]] = {}
    for j in range(len(at)):  # terms old and new
        fresh_terms.setdefault(("subjects", f"t{int(rng.integers(0, 12))}"), []).append(j)
    new_ids = np.insert(np.array(ids, dtype=object)[kept], at, np.array(fresh_ids, dtype=object)).tolist()

    index = RowIndex.of(ids).moved(old_at, fresh_ids, fresh_at)
    assert [index.get(i) for i in new_ids] == list(range(len(new_ids)))
    assert index.rows_of(new_ids).tolist() == list(range(len(new_ids)))
    removed = set(ids) - set(new_ids)
    assert all(index.get(i) is None for i in removed)

    moved = Postings.of(terms).moved(old_at, Postings.of(fresh_terms), fresh_at)
    expected: dict[tuple[str, str], list[int]] = {}
    for key, rows in terms.items():
        expected[key] = [int(old_at[r]) for r in rows if old_at[r] >= 0]
    for key, rows in fresh_terms.items():
        expected[key] = expected.get(key, []) + [int(fresh_at[r]) for r in rows]
    assert {k: sorted(v.tolist()) for k, v in moved.items()} == {k: sorted(v) for k, v in expected.items() if v}
