"""The inverted index of local features behind search by image, and the geometric check of its candidates.

Every stored illustration contributes its ORB descriptors (``features.py``) to one faiss binary index: exact
(``IndexBinaryFlat``) while the library is small, an inverted file (``IndexBinaryIVF``: descriptors filed under the
nearest of ``nlist`` binary centroids, a query descriptor compared only with the lists of its ``nprobe`` nearest) once
it is large. A descriptor's faiss id is ``illustration number << 12 | keypoint number``, so a hit says whose it is
and where it sits without another table.

A query's descriptors each find their ``neighbours(count)`` nearest stored descriptors (more in a larger library); each
illustration gets one vote per query descriptor, weighted by how rare the hit is (an idf: a descriptor that hits many
illustrations, a frame corner or a hatch, says little). The ``CANDIDATES`` best voted are then verified geometrically:
RANSAC fits a 4-degree-of-freedom similarity (scale, rotation, shift; ``cv2.estimateAffinePartial2D``) to the
query-to-stored keypoint pairs, and the pairs that agree with it (inliers) are counted. A printing of the same block
lines up everywhere; a copy recut by another hand or a picture of the same subject lines up only piecewise, so few pairs
agree. ``same_block`` needs ``SAME_BLOCK_INLIERS`` pairs within ``TIGHT_PX`` of one homography (``_tight``) and a
fraction ``SAME_BLOCK_RATIO`` of the best candidate's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from imagesvc.search.features import Features

__all__ = ["Candidate", "FeatureIndex", "build_index"]

KP_BITS = 12  # keypoints per illustration < 4096
K = 0  # stored neighbours per query descriptor; 0: ``neighbours(count)``
K_PER = 150  # illustrations per neighbour: look-alikes of a printing grow with the library, so must K
K_MIN, K_MAX = 8, 64
MAX_HAMMING = 64  # of 256 bits: a farther neighbour is no match
CANDIDATES = 400  # verified by RANSAC per query (about 0.4 ms each)
MIN_PAIRS = 6
MIN_SCALE = 0.05  # query-to-stored scale of a plausible transform, and its inverse
RANSAC_PX = 8.0  # reprojection error allowed, pixels of the stored (reduced) illustration
TIGHT_PX = 2.5  # ... and in the tight fit that decides same_block, pixels of the query (or of the stored, if finer)
SAME_BLOCK_INLIERS = 12
SAME_BLOCK_RATIO = 0.2
FLAT_UNTIL = 200_000  # descriptors (about 330 illustrations): an exact index below this, an inverted file above
NPROBE = 8


@dataclass(frozen=True)
class Candidate:
    number: int  # illustration number in the index
    inliers: int  # keypoint pairs consistent with one similarity transform
    pairs: int  # keypoint pairs proposed by the descriptor search
    votes: float
    loose: int  # inliers of the similarity fit (RANSAC_PX), before the tight one
    cells: int  # of the query's 4 x 4 grid, those holding an inlier: agreement over the picture, not one patch
    transform: np.ndarray | None  # 2x3, query pixels -> stored pixels


def _nlist(descriptors: int) -> int:
    """Inverted lists for ``descriptors`` stored: about 2 sqrt(n), a power of two, 1,024 to 65,536."""
    return int(min(65536, max(1024, 2 ** round(math.log2(2 * math.sqrt(descriptors))))))


def neighbours(count: int) -> int:
    """Stored neighbours each query descriptor keeps in a library of ``count`` illustrations: one per ``K_PER``,
    ``K_MIN`` to ``K_MAX``. Too few, and in a large library a printing's descriptors are crowded out by look-alikes
    (frame corners, hatching of the same subject); too many in a small one, and every illustration gets pairs
    enough to drown RANSAC in chance ones."""
    return int(min(K_MAX, max(K_MIN, count // K_PER)))


def _ids(number: int, count: int) -> np.ndarray:
    return (np.int64(number) << KP_BITS) | np.arange(count, dtype=np.int64)


class FeatureIndex:
    """Searchable local features of ``count`` illustrations; ``xy[number]`` are the keypoints of one of them."""

    def __init__(self, index: object, xy: list[np.ndarray], nprobe: int = NPROBE) -> None:
        import faiss

        faiss.omp_set_num_threads(1)  # one query, one core: the caller's pool bounds how many run at once
        self.index = index
        self.xy = xy
        self.count = len(xy)
        if isinstance(index, faiss.IndexBinaryIVF):
            index.nprobe = nprobe

    @property
    def descriptors(self) -> int:
        return int(self.index.ntotal)  # type: ignore[attr-defined]

    def memory_bytes(self) -> int:
        """Bytes held: 32 per stored code and 8 per faiss id, 4 per keypoint position, plus centroids."""
        n = self.descriptors
        return n * (32 + 8) + sum(a.nbytes for a in self.xy) + 32 * int(getattr(self.index, "nlist", 0))

    def candidates(
        self, query: Features, allowed: np.ndarray | None = None, limit: int = CANDIDATES
    ) -> list[Candidate]:
        """The illustrations that may share a block with ``query``, verified geometrically, most inliers first.

        ``allowed``: a boolean mask over illustration numbers (``None``: all)."""
        if len(query.desc) == 0 or self.descriptors == 0:
            return []
        k = K or neighbours(self.count)
        dist, hits = self.index.search(query.desc, k)  # type: ignore[attr-defined]
        ok = (hits >= 0) & (dist <= MAX_HAMMING)
        owner = np.where(ok, hits >> KP_BITS, -1)
        if allowed is not None:
            ok &= allowed[np.clip(owner, 0, None)]
            owner = np.where(ok, owner, -1)
        # one vote per (query descriptor, illustration): its nearest hit there
        qn, slot = np.nonzero(ok)
        own = owner[qn, slot]
        key = qn.astype(np.int64) * (self.count + 1) + own
        _, first = np.unique(key, return_index=True)
        qn, slot, own = qn[first], slot[first], own[first]
        spread = np.bincount(qn, minlength=len(query.desc))  # illustrations each query descriptor hit
        weight = np.log1p(k / spread[qn])  # idf: a hit shared by many illustrations says little
        weight *= 1.0 - dist[qn, slot] / (MAX_HAMMING + 1)
        votes = np.bincount(own, weights=weight, minlength=self.count)
        top = np.argsort(-votes, kind="stable")[:limit]
        top = top[votes[top] > 0]
        order = np.argsort(own, kind="stable")
        own_sorted = own[order]
        out = []
        for number in top:
            lo, hi = np.searchsorted(own_sorted, number), np.searchsorted(own_sorted, number, side="right")
            pick = order[lo:hi]
            # one pair per stored keypoint (its closest query descriptor): many query descriptors piling onto one
            # stored keypoint would let RANSAC take a collapse to one point for agreement
            kp = hits[qn[pick], slot[pick]] & ((1 << KP_BITS) - 1)
            closest = np.lexsort((dist[qn[pick], slot[pick]], kp))
            _, once = np.unique(kp[closest], return_index=True)
            pick, kp = pick[closest[once]], kp[closest[once]]
            if len(pick) < MIN_PAIRS:
                continue
            src = query.xy[qn[pick]]
            dst = self.xy[int(number)][kp].astype(np.float32)
            inliers, cells, transform = _ransac(src, dst, query.size)
            loose = inliers
            if inliers >= SAME_BLOCK_INLIERS and transform is not None:  # a contender: held to a tight fit
                scale = float(np.hypot(transform[0, 0], transform[1, 0]))  # stored pixels per query pixel
                inliers = _tight(src, dst, TIGHT_PX * max(1.0, scale))
            out.append(Candidate(int(number), inliers, len(pick), float(votes[number]), loose, cells, transform))
        out.sort(key=lambda c: (-c.inliers, -c.votes))
        return out


def same_block(found: list[Candidate]) -> list[Candidate]:
    """The candidates printed from the query's block: enough pairs in the tight fit, and not far fewer than the best
    candidate's (a recut copy agrees piecewise: a fraction of what a printing of the block does)."""
    if not found:
        return []
    best = max(c.inliers for c in found)
    return [c for c in found if c.inliers >= SAME_BLOCK_INLIERS and c.inliers >= SAME_BLOCK_RATIO * best]


def _ransac(src: np.ndarray, dst: np.ndarray, size: tuple[int, int]) -> tuple[int, int, np.ndarray | None]:
    """Inliers of the best similarity (each query and each stored keypoint counted once), the query grid cells
    they fall in, and the transform."""
    import cv2

    m, mask = cv2.estimateAffinePartial2D(
        src, dst, method=cv2.RANSAC, ransacReprojThreshold=RANSAC_PX, maxIters=1000, confidence=0.995
    )
    if m is None or mask is None:
        return 0, 0, None
    scale = float(np.hypot(m[0, 0], m[1, 0]))
    if not MIN_SCALE <= scale <= 1 / MIN_SCALE:  # no printing is 20 times larger or smaller than a query of it
        return 0, 0, None
    keep = mask.ravel().astype(bool)
    s_in, d_in = src[keep], dst[keep]
    distinct = min(len(np.unique(np.round(s_in), axis=0)), len(np.unique(np.round(d_in), axis=0)))
    w, h = max(1, size[0]), max(1, size[1])
    cells = np.unique(
        np.minimum(3, (s_in[:, 0] * 4 / w).astype(int)) * 4 + np.minimum(3, (s_in[:, 1] * 4 / h).astype(int))
    )
    return distinct, len(cells), m


def _tight(src: np.ndarray, dst: np.ndarray, px: float) -> int:
    """Pairs within ``px`` stored pixels of one homography (a photo's perspective included), each keypoint counted
    once.

    Two printings of one block agree to a pixel or two wherever they are compared; a copy recut by another hand
    agrees only where its cutter happened to, so its pairs scatter by several pixels and few survive."""
    import cv2

    h, mask = cv2.findHomography(src, dst, cv2.RANSAC, px, maxIters=2000, confidence=0.995)
    if h is None or mask is None:
        return 0
    keep = mask.ravel().astype(bool)
    return min(len(np.unique(np.round(src[keep]), axis=0)), len(np.unique(np.round(dst[keep]), axis=0)))


def build_index(
    batches: Iterable[list[Features]], total_descriptors: int, train: np.ndarray | None = None
) -> FeatureIndex:
    """A ``FeatureIndex`` of the features in ``batches`` (numbered in order); ``train``: a sample of descriptors for
    the inverted file's centroids (needed above ``FLAT_UNTIL`` descriptors)."""
    import faiss

    if total_descriptors <= FLAT_UNTIL:
        index: object = faiss.IndexBinaryIDMap(faiss.IndexBinaryFlat(256))
    else:
        if train is None:
            raise ValueError("an inverted file needs a training sample of descriptors")
        nlist = _nlist(total_descriptors)
        quantizer = faiss.IndexBinaryFlat(256)
        index = faiss.IndexBinaryIVF(quantizer, 256, nlist)
        index.train(train[: nlist * 40])  # type: ignore[attr-defined]
        index.own_fields = True  # type: ignore[attr-defined]
        quantizer.this.disown()
    xy: list[np.ndarray] = []
    for batch in batches:
        for f in batch:
            n = len(xy)
            xy.append(f.xy.astype(np.float16))
            if len(f.desc):
                index.add_with_ids(f.desc, _ids(n, len(f.desc)))  # type: ignore[attr-defined]
    return FeatureIndex(index, xy)


def chunks(items: list[Features], size: int) -> Iterator[list[Features]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
