"""Crop-tolerant perceptual hashes: find the illustrations printed from the same woodblock or plate as a picture.

One global pHash changes completely when a picture is cropped, framed by a border or photographed as part of a page.
So each stored illustration is hashed over a pyramid of windows (every crop of 40 to 100% of its width and of its
height, on a grid of a tenth: 484 windows), and a query over windows of itself (60 to 100%, on a grid of a
twentieth) that cut away a border or a margin of page. The closest pairs of windows say which illustrations may be
the same picture and how the two line up; hashes alone are not proof (random 64-bit hashes differ in about 32 bits,
but among the ~300,000 pairs compared per illustration some come within 12 by chance), so each candidate is verified
by correlating the aligned windows, pixels (``correlation``).
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image, ImageFilter

__all__ = [
    "SAME_BLOCK_BITS",
    "SAME_BLOCK_CORRELATION",
    "best_pairs",
    "correlation",
    "query_boxes",
    "stored_boxes",
    "window_hashes",
]

SIDE = 32  # pixels of the grey square each window is reduced to, as imagehash's pHash does
STORED_SIZES = (1.0, 0.8, 0.65, 0.5, 0.4)  # fractions of width (and, independently, of height)
STEP = 0.1
QUERY_SIZES = (1.0, 0.9, 0.8, 0.7, 0.6)
QUERY_STEP = 0.05
VERIFY_SIDE = 64  # pixels across the two windows compared when a candidate is verified
SCALES = (0.92, 0.96, 1.0, 1.04, 1.08)
SHIFTS = (-0.09, -0.06, -0.03, 0.0, 0.03, 0.06, 0.09)  # fractions of the window's side
SAME_BLOCK_BITS = 12  # a candidate's closest window pair must be this close ...
SAME_BLOCK_CORRELATION = 0.7  # ... and its aligned windows this alike, to be the same block


def _dct_rows(n: int, keep: int) -> np.ndarray:
    k = np.arange(keep)[:, None]
    x = np.arange(n)[None, :]
    return np.cos(math.pi * k * (2 * x + 1) / (2 * n))


_D = _dct_rows(SIDE, 8)
_BITS = (np.uint64(1) << np.arange(63, -1, -1, dtype=np.uint64)).astype(np.uint64)


def _positions(size: float, step: float) -> list[float]:
    if size >= 1.0:
        return [0.0]
    n = math.ceil((1.0 - size) / step - 1e-9) + 1
    return [float(v) for v in np.linspace(0.0, 1.0 - size, n)]


def _hash_boxes(image: Image.Image, boxes: list[tuple[float, float, float, float]]) -> np.ndarray:
    """pHash (8x8 low frequencies of a 32x32 DCT against their median) of each box (fractions) of ``image``."""
    grey = image.convert("L")
    w, h = grey.size
    squares = np.stack(
        [
            np.asarray(
                grey.resize((SIDE, SIDE), Image.Resampling.BOX, box=(x0 * w, y0 * h, x1 * w, y1 * h)),
                dtype=np.float64,
            )
            for x0, y0, x1, y1 in boxes
        ]
    )
    low = np.einsum("ki,nij,lj->nkl", _D, squares, _D).reshape(len(boxes), 64)
    bits = low > np.median(low, axis=1, keepdims=True)
    return (bits.astype(np.uint64) * _BITS).sum(axis=1, dtype=np.uint64)


def stored_boxes() -> list[tuple[float, float, float, float]]:
    """The windows hashed of each stored illustration (fractions x0, y0, x1, y1)."""
    return _boxes(STORED_SIZES, STEP)


def query_boxes() -> list[tuple[float, float, float, float]]:
    """The windows hashed of a query: whole, and inner crops that cut away a border or a margin of page."""
    return _boxes(QUERY_SIZES, QUERY_STEP)


def _boxes(sizes: tuple[float, ...], step: float) -> list[tuple[float, float, float, float]]:
    out = []
    for sw in sizes:
        for sh in sizes:
            for x in _positions(sw, step):
                for y in _positions(sh, step):
                    out.append((x, y, x + sw, y + sh))
    return out


def window_hashes(image: Image.Image, boxes: list[tuple[float, float, float, float]]) -> np.ndarray:
    """One pHash (uint64) per window of ``image``."""
    return _hash_boxes(image, boxes)


def best_pairs(
    query: np.ndarray, stored: np.ndarray, owner: np.ndarray, count: int, per: int = 3
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each of ``count`` illustrations, its ``per`` closest (query window, stored window) pairs, closest first:
    (distances in bits, query window numbers, stored rows), each of shape (count, per); a missing pair has distance
    64 and row -1. ``owner[i]`` says whose ``stored[i]`` is."""
    d = np.bitwise_count(stored[None, :] ^ query[:, None]).astype(np.int16)  # (query windows, stored rows)
    q_best = d.argmin(axis=0)
    per_row = d[q_best, np.arange(len(stored))]
    order = np.lexsort((per_row, owner))
    starts = np.searchsorted(owner[order], np.arange(count))
    ends = np.searchsorted(owner[order], np.arange(count), side="right")
    dist = np.full((count, per), 64, np.int64)
    qwin = np.zeros((count, per), np.int64)
    srow = np.full((count, per), -1, np.int64)
    for k in range(per):
        at = starts + k
        ok = at < ends
        rows = order[at[ok]]
        dist[ok, k], qwin[ok, k], srow[ok, k] = per_row[rows], q_best[rows], rows
    return dist, qwin, srow


def _inner(box: tuple[float, float, float, float], margin: float) -> tuple[float, float, float, float]:
    x0, y0, x1, y1 = box
    dx, dy = (x1 - x0) * margin, (y1 - y0) * margin
    return (x0 + dx, y0 + dy, x1 - dx, y1 - dy)


def _grey(image: Image.Image, box: tuple[float, float, float, float], side: int) -> np.ndarray:
    grey = image.convert("L")
    w, h = grey.size
    x0, y0, x1, y1 = box
    pixels = grey.resize((side, side), Image.Resampling.BOX, box=(x0 * w, y0 * h, x1 * w, y1 * h))
    values = np.asarray(pixels.filter(ImageFilter.GaussianBlur(1.0)), dtype=np.float64)
    return (values - values.mean()) / (values.std() or 1.0)


def correlation(
    query: Image.Image,
    qbox: tuple[float, float, float, float],
    stored: Image.Image,
    sbox: tuple[float, float, float, float],
) -> float:
    """How alike two windows look once aligned: the best Pearson correlation of their blurred grey pixels over small
    shifts and scalings of the stored window around where the hash pair put it (1: identical). A margin of each
    window is left out: a frame round a window would make any two framed panels alike."""
    a = _grey(query, _inner(qbox, 0.1), VERIFY_SIDE)
    x0, y0, x1, y1 = _inner(sbox, 0.1)
    w, h = x1 - x0, y1 - y0

    def score(scale: float, dx: float, dy: float) -> float:
        cx, cy = x0 + w / 2 + dx * w, y0 + h / 2 + dy * h
        box = (cx - w * scale / 2, cy - h * scale / 2, cx + w * scale / 2, cy + h * scale / 2)
        if min(box) < -1e-9 or max(box) > 1 + 1e-9:
            return -1.0
        return float((a * _grey(stored, box, VERIFY_SIDE)).mean())

    return max(score(s, dx, dy) for s in SCALES for dx in SHIFTS for dy in SHIFTS)
