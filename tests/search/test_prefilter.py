"""A large text index is scored in two steps (each illustration's mean passage, then the best passage of the top
candidates): the scores never overstate an illustration, and the best match is the one an exhaustive scan finds."""

from __future__ import annotations

import numpy as np
import pytest

from imagesvc.search.dense import Passages, dot
from imagesvc.search.products import MeanCodes
from imagesvc.search.vectors import VectorIndex


def test_the_two_step_score_finds_what_the_full_scan_finds() -> None:
    rng = np.random.default_rng(7)
    n, dims = 60_000, 96
    matrix = rng.standard_normal((3 * n, dims), dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    index = VectorIndex([f"ill-{k // 3}" for k in range(3 * n)], [""] * (3 * n), matrix, "test")
    full, fast = Passages.of(index, prefilter_from=10**9), Passages.of(index)
    assert full.means is None and fast.means is not None  # 60,000 illustrations: over the prefilter's threshold
    for _ in range(20):
        target = int(rng.integers(0, 3 * n))  # a query close to one passage of one illustration
        query = matrix[target] + 0.05 * rng.standard_normal(dims).astype(np.float32)
        query /= np.linalg.norm(query)
        exact, quick = full.score(matrix, query), fast.score(matrix, query)
        assert int(np.argmax(quick)) == int(np.argmax(exact)) == target // 3
        assert isinstance(fast.means, MeanCodes)  # a mean read from its codes never exceeds the best by more than
        assert np.all(quick <= exact + fast.means.error(query))  # their error
        top = np.argsort(-exact)[:1]
        assert quick[top] == exact[top]


def test_the_product_is_numpys_for_every_layout_and_refuses_rows_out_of_range() -> None:
    rng = np.random.default_rng(3)
    matrix = rng.standard_normal((1_000, 48), dtype=np.float32)
    vector = rng.standard_normal(48, dtype=np.float32)
    rows = rng.integers(0, 1_000, 300)
    assert np.allclose(dot(matrix, vector), matrix @ vector, atol=1e-5)
    assert np.allclose(dot(matrix, vector, rows), matrix[rows] @ vector, atol=1e-5)
    for other in (matrix.astype(np.float64), matrix[:, ::2], np.asfortranarray(matrix)):  # numpy's product then
        assert np.allclose(dot(other, vector[: other.shape[1]]), other @ vector[: other.shape[1]], atol=1e-5)
    assert dot(matrix[:0], vector).shape == (0,)
    with pytest.raises(IndexError):  # faiss reads rows without a bounds check: an index past the end never gets there
        dot(matrix, vector, np.array([0, 1_000]))
    with pytest.raises(ValueError):  # nor a vector of another length
        dot(matrix, vector[:40])


def test_two_models_columns_are_scored_each_by_its_own_best_passage() -> None:
    """``e5+minilm`` rows hold two models' vectors side by side; a query's two parts (each zero outside its columns) get
    each one's best passage per illustration, which may be two different passages, and the prefilter keeps it."""
    rng = np.random.default_rng(11)
    n, first, second = 60_000, 32, 48
    matrix = rng.standard_normal((3 * n, first + second), dtype=np.float32)
    matrix[:, :first] /= np.linalg.norm(matrix[:, :first], axis=1, keepdims=True)
    matrix[:, first:] /= np.linalg.norm(matrix[:, first:], axis=1, keepdims=True)
    index = VectorIndex([f"ill-{k // 3}" for k in range(3 * n)], [""] * (3 * n), matrix, "test")
    full, fast = Passages.of(index, prefilter_from=10**9), Passages.of(index, split=first)
    assert fast.means is not None and fast.second_means is not None and fast.means.shape[1] == first
    target = 3 * 1234
    a, b = np.zeros(first + second, np.float32), np.zeros(first + second, np.float32)
    a[:first] = matrix[target, :first]  # the first model sees passage 0 of illustration 1234 ...
    b[first:] = matrix[target + 2, first:]  # ... the second its passage 2
    for passages in (full, fast):
        one, two = passages.score_parts(matrix, [a, b])
        assert int(np.argmax(one)) == int(np.argmax(two)) == 1234
        assert one[1234] == pytest.approx(1.0, abs=1e-5) and two[1234] == pytest.approx(1.0, abs=1e-5)
    exact = full.score_parts(matrix, [a, b])
    assert np.allclose(exact[0], full.best(matrix[:, :first] @ a[:first]), atol=1e-5)
    assert np.allclose(exact[1], full.best(matrix[:, first:] @ b[first:]), atol=1e-5)


def test_the_row_product_leaves_faiss_thread_setting_as_it_was() -> None:
    """The product by row index runs on one OpenMP thread (a team of spinning threads doubled its CPU time), and
    the calling thread's own setting is put back: another faiss user on the thread still gets its team."""
    faiss = pytest.importorskip("faiss")
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(3)
    try:
        matrix = np.ones((10, 8), np.float32)
        assert dot(matrix, np.ones(8, np.float32), np.array([1, 2])).tolist() == [8.0, 8.0]
        assert faiss.omp_get_max_threads() == 3
    finally:
        faiss.omp_set_num_threads(before)


def test_one_damaged_row_costs_only_its_own_illustration() -> None:
    """Hostile index: one passage's vector is NaN (a damaged or badly embedded row): only that illustration loses
    its score, in either model's columns."""
    rng = np.random.default_rng(23)
    n, first, second = 300, 16, 24
    matrix = rng.standard_normal((3 * n, first + second), dtype=np.float32)
    matrix[:, :first] /= np.linalg.norm(matrix[:, :first], axis=1, keepdims=True)
    matrix[:, first:] /= np.linalg.norm(matrix[:, first:], axis=1, keepdims=True)
    matrix[7] = np.nan  # illustration 2's second passage
    index = VectorIndex([f"ill-{k // 3}" for k in range(3 * n)], [""] * (3 * n), matrix, "test")
    whole = Passages.of(index, prefilter_from=1, split=first)
    target = 3 * 100  # illustration 100's first passage, asked in each model's columns alone
    a, b = np.zeros(first + second, np.float32), np.zeros(first + second, np.float32)
    a[:first], b[first:] = matrix[target, :first], matrix[target, first:]
    for scores in whole.score_parts(matrix, [a, b]):
        assert int(np.nanargmax(scores)) == 100 and np.isfinite(np.delete(scores, 2)).all()
