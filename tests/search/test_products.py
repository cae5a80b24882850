"""The first step of a large text query reads each illustration's mean passage from one-byte codes: its scores stay
within the codes' stated error of the float32 product, with faiss's scanner and with numpy's product alike, and the
illustration that clearly matches best is always among the candidates, scored by its exact best passage."""

from __future__ import annotations

import numpy as np
import pytest

from imagesvc.search.dense import CANDIDATES, Passages, highest
from imagesvc.search.products import MeanCodes
from imagesvc.search.vectors import VectorIndex


def unit_rows(rng: np.random.Generator, count: int, dims: int) -> np.ndarray:
    rows = rng.standard_normal((count, dims), dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_codes_score_within_their_error_with_faiss_and_with_numpy() -> None:
    pytest.importorskip("faiss")
    rng = np.random.default_rng(31)
    means = unit_rows(rng, 3 * 20_000, 384).reshape(20_000, 3, 384).mean(axis=1)
    means += 0.3 * unit_rows(rng, 1, 384)  # a direction every row shares, as e5's vectors do
    scanned, decoded = MeanCodes(means), MeanCodes(means, with_faiss=False)
    assert scanned._quantiser is not None and decoded._quantiser is None  # each path taken for real
    assert scanned.codes.dtype == np.uint8 and scanned.nbytes < means.nbytes / 3.9  # a quarter of the bytes
    for query in unit_rows(rng, 5, 384):
        exact = means @ query
        fast, slow = scanned.scores(query), decoded.scores(query)
        bound = scanned.error(query)
        assert bound < 0.01  # half a step per column: small beside the spread of the scores
        assert np.abs(fast - exact).max() <= bound and np.abs(slow - exact).max() <= bound
        assert np.abs(fast - exact).std() < 1e-3 and np.allclose(fast, slow, atol=1e-5)
    with pytest.raises(ValueError):  # a vector of another length is refused, not read past its end
        scanned.scores(np.ones(100, np.float32))


def test_a_damaged_row_scores_nan_and_spoils_no_other() -> None:
    rng = np.random.default_rng(37)
    means = unit_rows(rng, 1_000, 64)
    means[5] = np.nan
    means[9, 3] = np.inf
    query = unit_rows(rng, 1, 64)[0]
    for codes in (MeanCodes(means), MeanCodes(means, with_faiss=False)):
        scores = codes.scores(query)
        assert np.isnan(scores[[5, 9]]).all() and np.isfinite(np.delete(scores, [5, 9])).all()
        clean = np.delete(means, [5, 9], axis=0) @ query
        assert np.abs(np.delete(scores, [5, 9]) - clean).max() <= codes.error(query)
    assert MeanCodes(np.zeros((0, 8), np.float32)).scores(np.ones(8, np.float32)).shape == (0,)


def test_highest_keeps_the_top_in_row_order_ties_included_and_never_nan() -> None:
    scores = np.array([0.1, np.nan, 0.9, 0.5, 0.9, -1.0, 0.7], np.float32)
    assert highest(scores, 2).tolist() == [2, 4]
    assert highest(scores, 3).tolist() == [2, 4, 6]
    assert highest(np.array([0.3, 0.5, 0.5, 0.1], np.float32), 2).tolist() == [1, 2]
    assert highest(np.array([0.3, 0.5, 0.5, 0.1], np.float32), 1).tolist() == [1, 2]  # a tie with the last: kept
    assert highest(scores, 6).tolist() == [0, 2, 3, 4, 5, 6] == highest(scores, 100).tolist()
    assert highest(scores, 0).tolist() == []
    rng = np.random.default_rng(41)
    many = rng.standard_normal(50_000).astype(np.float32)
    many[rng.integers(0, 50_000, 30)] = np.nan
    assert highest(many, 4_096).tolist() == sorted(np.argsort(-np.nan_to_num(many, nan=-np.inf))[:4_096].tolist())


def test_the_clearly_best_illustration_is_always_a_candidate_and_scored_exactly() -> None:
    """60,000 illustrations of three random passages: the prefilter on one-byte means keeps almost every candidate
    the float32 means keep, and an illustration whose passages all lie near the query comes first with its exact
    best passage (had its mean been lost, it would keep the mean, below its best)."""
    pytest.importorskip("faiss")
    rng = np.random.default_rng(43)
    n, dims = 60_000, 384
    matrix = unit_rows(rng, 3 * n, dims)
    index = VectorIndex([f"ill-{k // 3}" for k in range(3 * n)], [""] * (3 * n), matrix, "test")
    coded, floats = Passages.of(index), Passages.of(index, codes=False)
    assert isinstance(coded.means, MeanCodes) and isinstance(floats.means, np.ndarray)
    kept = []
    for _ in range(10):
        query = unit_rows(rng, 1, dims)[0]
        ours, theirs = highest(coded._mean_scores(query), CANDIDATES), highest(floats._mean_scores(query), CANDIDATES)
        kept.append(len(np.intersect1d(ours, theirs)) / len(theirs))
    assert np.mean(kept) > 0.98
    for _ in range(5):
        target = int(rng.integers(0, n))
        query = unit_rows(rng, 1, dims)[0]
        for row in range(3 * target, 3 * target + 3):  # every passage of the target close to the query
            matrix[row] = query + 0.2 * unit_rows(rng, 1, dims)[0]
            matrix[row] /= np.linalg.norm(matrix[row])
        near = Passages.of(index)
        exact = Passages.of(index, prefilter_from=10**9).score(matrix, query)
        quick = near.score(matrix, query)
        assert int(np.argmax(quick)) == target and quick[target] == exact[target]


@pytest.mark.parametrize("change", ["gone", "reads otherwise"])
def test_a_faiss_whose_scanner_changed_is_not_used_and_costs_no_score(
    monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """The scanner is a lower layer of faiss than its index API: a release that removed it, or reads the codes
    otherwise, is found by a probe when the codes are built; numpy reads them then, within the same error."""
    pytest.importorskip("faiss")

    def changed(quantiser: object, weighted: np.ndarray, codes: np.ndarray) -> np.ndarray:
        if change == "gone":
            raise AttributeError("'ScalarQuantizer' object has no attribute 'select_InvertedListScanner'")
        return np.zeros(len(codes), np.float32)

    monkeypatch.setattr(MeanCodes, "_faiss_scores", staticmethod(changed))
    rng = np.random.default_rng(41)
    means = unit_rows(rng, 2_000, 384)
    codes = MeanCodes(means)
    assert codes._quantiser is None
    query = unit_rows(rng, 1, 384)[0]
    assert np.abs(codes.scores(query) - means @ query).max() <= codes.error(query)
