"""Guided fits: a query matched to a stored illustration keypoint by keypoint where a transform puts it.

The index's pairs are a sample (a descriptor's nearest neighbours in a large library are crowded by look-alikes);
given a transform from the query to a candidate, every stored keypoint in the query's footprint is paired with the
query keypoints that the transform puts near it, and the pairs are held to one homography within ``tight_px``.
Two printings of one block agree to a pixel or two everywhere; a recut or a picture of the same subject agrees
piecewise. ``Fit`` says how a fit came out, and its methods are the rules that read it.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from imagesvc.search.features import Features, near_pairs
from imagesvc.search.match_params import MatchParams

__all__ = ["NO_FIT", "Fit", "compose", "guided_fit", "hamming", "stretch_alike"]


class Fit(NamedTuple):
    """A guided fit of a query to a stored illustration (``guided_fit``)."""

    proposed: int  # pairs made by position
    tight: int  # of them, within ``tight_px`` of one homography
    cells: int  # of the query's guided_grid x guided_grid cells holding a tight pair
    stretch: float  # of the homography at the query's centre (1.0: a similarity)
    strong: int  # tight pairs whose descriptors differ by at most ``strong_hamming`` bits

    def same_block(self, p: MatchParams) -> bool:
        """Whether this fit alone shows the same block (``printings._guided``)."""
        return (
            self.tight >= p.guided_pairs
            and self.stretch <= p.guided_stretch
            and (
                self.cells >= p.guided_cells or (self.cells >= p.guided_fewer_cells and self.strong >= p.guided_strong)
            )
        )

    def sibling(self, p: MatchParams) -> bool:
        """Whether a whole printing fitted to another agrees with it as two printings of one block do
        (``sibling_pairs`` over ``sibling_cells``; two different blocks of one subject: at most 22 over 9)."""
        return self.tight >= p.sibling_pairs and self.cells >= p.sibling_cells

    def near(self, p: MatchParams) -> bool:
        """Whether it comes close: the same block if a sibling printing agrees (``printings._siblings``)."""
        return self.tight >= p.near_pairs and self.cells >= p.near_cells and self.stretch <= p.guided_stretch

    def close(self, p: MatchParams) -> bool:
        """Whether it comes closer than chance: the same block if a printing of its own block, found by its own
        search, comes as close to the query through it (``printings._corroborated``)."""
        return (
            self.tight >= p.close_pairs
            and self.cells >= p.close_cells
            and self.stretch <= p.close_stretch
            and self.strong >= p.close_strong * self.tight
        )


NO_FIT = Fit(0, 0, 0, math.inf, 0)
_POPCOUNT = np.array([bin(b).count("1") for b in range(256)], np.uint8)


def hamming(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bits apart of descriptor rows ``a`` and ``b`` (uint8, 32 bytes each; broadcast as numpy broadcasts)."""
    return _POPCOUNT[np.bitwise_xor(a, b)].sum(-1, dtype=np.int32)


def compose(second: np.ndarray, first: np.ndarray) -> np.ndarray:
    """The 2x3 transform that applies ``first`` then ``second``."""
    return second[:, :2] @ first + np.hstack([np.zeros((2, 2)), second[:, 2:]])


def guided_fit(query: Features, stored: Features, transform: np.ndarray, p: MatchParams) -> Fit:
    """Pairs of ``query`` and ``stored`` keypoints that ``transform`` (query -> stored, 2x3) puts within
    ``guided_px`` of each other with descriptors within ``guided_hamming`` bits (one per keypoint on each side, the
    closest); how many of them lie within ``tight_px`` of one homography, in how many of the query's
    ``guided_grid``² cells those fall, how far the homography is from a similarity at the query's centre (the
    ratio of its stretch along two directions; 1.0: none), and how many of those pairs are near twins
    (``strong_hamming``). The homography then guides a further round (a similarity from a handful of pairs is a
    little off far from them), and the better round is kept."""
    scale = float(np.hypot(transform[0, 0], transform[1, 0]))
    best = NO_FIT
    m = np.vstack([transform, [0.0, 0.0, 1.0]])
    for _ in range(p.guided_rounds):
        si, qi, ham = _guided_pairs(query, stored, m, p)
        if len(si) < 8:
            return best if best.tight else NO_FIT._replace(proposed=len(si))
        src, dst = query.xy[qi].astype(np.float32), stored.xy[si].astype(np.float32)
        hom, mask = _homography(src, dst, p.tight_px * max(1.0, scale))
        if hom is None:
            return best
        inside = src[mask]
        g = p.guided_grid
        w, h = query.size
        cx = np.minimum(g - 1, (inside[:, 0] * g / max(1, w)).astype(int))
        cy = np.minimum(g - 1, (inside[:, 1] * g / max(1, h)).astype(int))
        cells = len(np.unique(cy * g + cx))
        strong = int((ham[mask] <= p.strong_hamming).sum())
        found = Fit(len(si), len(inside), cells, _stretch(hom, w / 2, h / 2), strong)
        if found.tight <= best.tight:
            break
        best, m = found, hom
    return best


def stretch_alike(stretch: float, best: float, p: MatchParams) -> bool:
    """Whether a fit's ``stretch`` is within ``confirm_stretch`` of the best fit's (a best fit that is degenerate,
    its stretch infinite, holds no one to its shape)."""
    if not math.isfinite(best):
        return True
    return math.isfinite(stretch) and abs(math.log(stretch / best)) <= math.log(p.confirm_stretch)


def _stretch(hom: np.ndarray, x: float, y: float) -> float:
    """How much more ``hom`` stretches one direction than another at ``(x, y)`` (1.0 for a similarity)."""
    at = _project(hom, np.array([[x, y], [x + 1, y], [x, y + 1]], np.float32))
    sv = np.linalg.svd(np.stack([at[1] - at[0], at[2] - at[0]], 1), compute_uv=False)
    return float(sv[0] / sv[1]) if sv[1] > 1e-9 else math.inf


def _homography(src: np.ndarray, dst: np.ndarray, px: float) -> tuple[np.ndarray | None, np.ndarray]:
    import cv2

    hom, mask = cv2.findHomography(src, dst, cv2.RANSAC, px, maxIters=2000, confidence=0.995)
    if hom is None or mask is None or abs(np.linalg.det(hom)) < 1e-12:
        return None, np.zeros(len(src), bool)
    return hom, mask.ravel().astype(bool)


def _guided_pairs(
    query: Features, stored: Features, m: np.ndarray, p: MatchParams
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stored and query keypoint numbers paired by position through ``m`` (3x3, query -> stored pixels), and the
    Hamming distance of each pair's descriptors."""
    s = stored.xy.astype(np.float32)
    w, h = query.size
    try:
        back = np.linalg.inv(m)
    except np.linalg.LinAlgError:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int32)
    sq = _project(back, s)  # stored keypoints in query pixels: those inside the query's footprint
    foot = np.nonzero((sq[:, 0] >= 0) & (sq[:, 0] < w) & (sq[:, 1] >= 0) & (sq[:, 1] < h))[0]
    qs = _project(m, query.xy.astype(np.float32))  # query keypoints in stored pixels
    si, qi = near_pairs(s[foot], qs, p.guided_px)
    ham = hamming(stored.fit_desc[foot[si]], query.fit_desc[qi])
    ok = ham <= p.guided_hamming
    si, qi, ham = foot[si[ok]], qi[ok], ham[ok]
    for by_stored in (True, False):  # the closest pair of each stored keypoint, then of each query keypoint
        side = si if by_stored else qi
        order = np.lexsort((ham, side))
        _, once = np.unique(side[order], return_index=True)
        si, qi, ham = si[order[once]], qi[order[once]], ham[order[once]]
    return si, qi, ham


def _project(m: np.ndarray, xy: np.ndarray) -> np.ndarray:
    p = xy @ m[:2, :2].T + m[:2, 2]
    z = xy @ m[2, :2] + m[2, 2]
    z = np.where(np.abs(z) < 1e-9, 1e-9, z)
    return p / z[:, None]
