"""One query vector against many rows, the products dense text search is made of: float32 rows (``dot``), and each
illustration's mean passage kept in one byte per value (``MeanCodes``), both with faiss's SIMD loops and numpy where
faiss cannot load."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

__all__ = ["MeanCodes", "dot"]

log = logging.getLogger("imagesvc.search.dense")
_faiss_module: Any = None


def _faiss() -> Any:
    """faiss (a core dependency), imported on the first large product; ``None`` where it cannot load."""
    global _faiss_module
    if _faiss_module is None:
        try:
            import faiss

            _faiss_module = faiss
        except (ImportError, OSError) as exc:  # no build of its wheel for this platform: numpy's product instead
            log.warning("faiss cannot load (%s): dense text scores use numpy's product", exc)
            _faiss_module = False
    return _faiss_module or None


def dot(matrix: np.ndarray, vector: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """``matrix @ vector`` (only ``rows`` of ``matrix``, in that order, when given), float32. A text query is one
    vector against many rows, a product that memory bandwidth bounds: faiss's SIMD loop reads each row once and
    takes ``rows`` in place, where numpy's BLAS ``gemv`` was 2 to 2.5 times slower on one core here and
    ``matrix[rows]`` copies them first (docs/benchmarks.md). numpy where faiss cannot run or the layout differs."""
    faiss = _faiss()
    vector = np.ascontiguousarray(vector, np.float32)
    usable = (
        faiss is not None
        and matrix.dtype == np.float32
        and matrix.ndim == 2
        and matrix.flags.c_contiguous
        and vector.shape == (matrix.shape[1],)
    )
    if not usable:
        return (matrix if rows is None else matrix[rows]) @ vector
    if rows is None:
        out = np.empty(matrix.shape[0], np.float32)
        if len(out):
            faiss.fvec_inner_products_ny(
                faiss.swig_ptr(out), faiss.swig_ptr(vector), faiss.swig_ptr(matrix), matrix.shape[1], len(out)
            )
        return out
    picked = np.ascontiguousarray(rows, np.int64)
    if len(picked) and (picked.min() < 0 or picked.max() >= matrix.shape[0]):  # faiss reads without bounds checks
        raise IndexError("row out of range")
    out = np.empty(len(picked), np.float32)
    if len(out):
        # This product is an OpenMP loop over its one query: with faiss's default team (one thread per core) the
        # other threads wait at its end spinning, which doubled its CPU time on 2 cores (docs/benchmarks.md). One
        # thread for it, on this thread only (OpenMP's setting is per calling thread), then the setting as it was.
        before = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)
        try:
            faiss.fvec_inner_products_by_idx(
                faiss.swig_ptr(out),
                faiss.swig_ptr(vector),
                faiss.swig_ptr(matrix),
                faiss.swig_ptr(picked),
                matrix.shape[1],
                1,
                len(out),
            )
        finally:
            faiss.omp_set_num_threads(before)
    return out


LEVELS = 255  # a value is kept as floor(255 u), u its place in its column's range, and read as the step's midpoint
_CHUNK = 8_192  # rows encoded at a time: no float temporary the size of the rows
_DECODED = 1_024  # rows numpy decodes at a time: 1.5 MB of float32 at 384 columns, read again while in cache


class MeanCodes:
    """Rows of float32 (each illustration's mean passage vector) kept in one byte per value: each column mapped onto
    [0, 1] by its own range over the finite rows, then ``floor(255 u)``. A product with a query reads a quarter of
    the float32 bytes: faiss's scalar quantiser (``QT_8bit_uniform``) decodes each step's midpoint and multiplies in
    one SIMD pass; numpy decodes a block of rows at a time where faiss cannot load. Each score is within
    ``error(vector)`` of the float32 product (half a step per column, weighted by the query); a row that was not
    finite scores NaN, as its float32 product would."""

    def __init__(self, rows: np.ndarray, with_faiss: bool = True) -> None:
        """``with_faiss=False``: numpy's product even where faiss loads (as where it cannot)."""
        rows = np.asarray(rows, np.float32)
        finite = np.isfinite(rows).all(axis=1)
        self.damaged = np.flatnonzero(~finite)
        kept = rows[finite] if len(self.damaged) else rows
        self.low = kept.min(axis=0) if len(kept) else np.zeros(rows.shape[1], np.float32)
        width = (kept.max(axis=0) - self.low) if len(kept) else np.ones(rows.shape[1], np.float32)
        self.width = np.where(width > 0, width, 1).astype(np.float32)
        self.codes = np.empty(rows.shape, np.uint8)
        for start in range(0, len(rows), _CHUNK):
            block = (rows[start : start + _CHUNK] - self.low) / self.width
            block = np.nan_to_num(np.floor(block * LEVELS), nan=0.0)
            self.codes[start : start + _CHUNK] = np.clip(block, 0, LEVELS)
        self._quantiser: Any = None
        faiss = _faiss() if with_faiss else None
        if faiss is not None:  # [0, 1] is every column's range in the codes: trained on it, it reads them as made
            quantiser = faiss.ScalarQuantizer(rows.shape[1], faiss.ScalarQuantizer.QT_8bit_uniform)
            quantiser.train(np.array([np.zeros(rows.shape[1]), np.ones(rows.shape[1])], np.float32))
            self._quantiser = self._checked(quantiser)

    def _checked(self, quantiser: Any) -> Any:
        """``quantiser`` if faiss's code scanner (a lower layer than its index API) reads a probe of these codes as
        numpy's decode does; else ``None``, logged, and numpy reads them: a faiss whose scanner changed costs speed,
        never a wrong score or a failed search."""
        probe = self.codes[:64]
        weighted = np.linspace(-1, 1, self.shape[1], dtype=np.float32)
        try:
            got = self._faiss_scores(quantiser, weighted, probe)
        except Exception as exc:  # an API that moved: AttributeError, TypeError, SWIG's own errors
            log.warning("faiss's scalar-quantiser scanner cannot be used (%s): the means are read by numpy", exc)
            return None
        want = self._numpy_scores(weighted, probe)
        if got.shape != want.shape or not np.allclose(got, want, atol=1e-4, equal_nan=True):
            log.warning("faiss's scalar-quantiser scanner reads the codes otherwise: the means are read by numpy")
            return None
        return quantiser

    @property
    def shape(self) -> tuple[int, int]:
        return self.codes.shape  # type: ignore[return-value]

    @property
    def nbytes(self) -> int:
        return int(self.codes.nbytes + self.low.nbytes + self.width.nbytes)

    def __len__(self) -> int:
        return len(self.codes)

    def error(self, vector: np.ndarray) -> float:
        """The most any score for ``vector`` can differ from the float32 product: half a step in each column, and
        float32 rounding in both sums."""
        size = np.abs(vector.astype(np.float64))
        rounding = 4 * len(size) * float(np.finfo(np.float32).eps) * float(size @ (np.abs(self.low) + self.width))
        return float(size @ self.width) / (2 * LEVELS) + rounding

    def scores(self, vector: np.ndarray) -> np.ndarray:
        """Each row's product with ``vector`` (float32), from its codes."""
        vector = np.ascontiguousarray(vector, np.float32)
        if vector.shape != (self.shape[1],):
            raise ValueError(f"a vector of {self.shape[1]} values is needed, not {vector.shape}")
        # row . v = low . v + sum((code + 0.5) / 255 * width * v): the codes' part is a product with width * v
        weighted = vector * self.width
        quantiser = self._quantiser
        if quantiser is not None:
            out = self._faiss_scores(quantiser, weighted, self.codes)
        else:
            out = self._numpy_scores(weighted, self.codes)
        out += np.float32(self.low.astype(np.float64) @ vector)
        out[self.damaged] = np.nan
        return out

    @staticmethod
    def _numpy_scores(weighted: np.ndarray, codes: np.ndarray) -> np.ndarray:
        out = np.empty(len(codes), np.float32)
        half = np.float32(0.5 * weighted.sum())
        for start in range(0, len(out), _DECODED):
            out[start : start + _DECODED] = codes[start : start + _DECODED].astype(np.float32) @ weighted + half
        out /= np.float32(LEVELS)
        return out

    @staticmethod
    def _faiss_scores(quantiser: Any, weighted: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """faiss's scanner of scalar-quantised codes over every row, asked for each row above -inf: every finite
        product, in row order. Its k-nearest search would sort all rows in a heap (31 to 64 ms at 200,000); this
        pass collects them as it goes."""
        faiss = _faiss()
        n = len(codes)
        if not n:
            return np.empty(0, np.float32)
        # the scanner reads ``quantiser``, which this frame holds until it is done
        scanner = quantiser.select_InvertedListScanner(faiss.METRIC_INNER_PRODUCT, None, True, None, False)
        scanner.set_query(faiss.swig_ptr(weighted))
        scanner.set_list(0, 0)
        result = faiss.RangeSearchResult(1, False)
        partial = faiss.RangeSearchPartialResult(result)
        found = partial.new_result(0)
        no_ids = np.empty(0, np.int64)  # with store_pairs the scanner names each row by its position, not by ids
        scanner.scan_codes_range(n, faiss.swig_ptr(codes), faiss.swig_ptr(no_ids), float("-inf"), found)
        count = int(found.nres)
        labels, values = np.empty(count, np.int64), np.empty(count, np.float32)
        partial.copy_range(0, count, faiss.swig_ptr(labels), faiss.swig_ptr(values))
        if count == n:  # every row, each once, in order
            return values
        out = np.full(n, np.nan, np.float32)  # a NaN product (a query not finite) is above nothing
        out[labels] = values
        return out
