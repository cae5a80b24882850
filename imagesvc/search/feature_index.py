"""The inverted index of local features behind search by image, and the geometric check of its candidates.

Every stored illustration contributes its ORB descriptors (``features.py``) to one faiss binary index: exact
(``IndexBinaryFlat``) while the library is small, an inverted file (``IndexBinaryIVF``: descriptors filed under the
nearest of ``nlist`` binary centroids, a query descriptor compared only with the lists of its ``nprobe`` nearest) once
it is large. A descriptor's faiss id is ``illustration number << 12 | keypoint number``, so a hit says whose it is
and where it sits without another table.

A query's descriptors each find their ``neighbours(count)`` nearest stored descriptors (more in a larger library); each
pair votes for its illustration, weighted by closeness and by how rare the hit is (an idf: a descriptor that hits many
illustrations, a frame corner or a hatch, says little), in the bin of the rotation and change of pyramid level the
pair implies (each keypoint's ``Features.shape``): a printing's pairs agree on one bin, a look-alike's scatter. Each
illustration is scored by its best bin, and the ``CANDIDATES`` best are then verified geometrically on that bin's pairs:
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
K_PER = 40  # illustrations per neighbour: look-alikes of a printing grow with the library, so must K
K_MIN, K_MAX = 24, 256
MAX_HAMMING = 40  # of 256 bits: a farther neighbour is no match
SIGMA = 16.0  # bits: a pair's vote falls off as exp(-(distance / SIGMA)^2)
TURNS = 16  # bins of the rotation a pair implies (22.5 degrees each) ...
LEVELS = 17  # ... and of its change of pyramid level (-8 to +8, 1.2x each)
WINDOW = 3  # bins a pair votes in along each (neighbours included: a pair's own estimate is rough)
PRESELECT = 4000  # illustrations kept by their total votes before each is scored by its best bin
CANDIDATES = 400  # verified by RANSAC per query (about 0.4 ms each)
MIN_PAIRS = 6
MIN_SCALE = 0.05  # query-to-stored scale of a plausible transform, and its inverse
RANSAC_PX = 8.0  # reprojection error allowed, pixels of the stored (reduced) illustration
TIGHT_PX = 2.5  # ... and in the tight fit that decides same_block, pixels of the query (or of the stored, if finer)
SAME_BLOCK_INLIERS = 12
SAME_BLOCK_RATIO = 0.2
FLAT_UNTIL = 200_000  # descriptors (about 330 illustrations): an exact index below this, an inverted file above
NPROBE = 8
TRAIN_PER_LIST = 40  # training descriptors per inverted list (faiss asks for at least 39)
TRAIN_ITERATIONS = 10  # of k-means: faiss's default 25 made training most of the build at 200,000 illustrations


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

    def __init__(
        self, index: object, xy: list[np.ndarray], nprobe: int = NPROBE, shape: np.ndarray | None = None
    ) -> None:
        """``shape``: every keypoint's orientation and pyramid level (``Features.shape``), illustration after
        illustration (``None``: an index made without them; votes then ignore the pairs' rotation and scale)."""
        import faiss

        faiss.omp_set_num_threads(1)  # one query, one core: the caller's pool bounds how many run at once
        self.index = index
        self.xy = xy
        self.count = len(xy)
        self.shape = shape
        self._starts = np.concatenate([[0], np.cumsum([len(a) for a in xy])]).astype(np.int64)
        if shape is not None and len(shape) != self._starts[-1]:
            raise ValueError(f"{len(shape)} keypoint shapes for {self._starts[-1]} keypoints")
        if isinstance(index, faiss.IndexBinaryIVF):
            index.nprobe = nprobe

    @property
    def descriptors(self) -> int:
        return int(self.index.ntotal)  # type: ignore[attr-defined]

    def memory_bytes(self) -> int:
        """Bytes held: 32 per stored code and 8 per faiss id, 4 per keypoint position, plus centroids."""
        n = self.descriptors
        held = sum(a.nbytes for a in self.xy) + (self.shape.nbytes if self.shape is not None else 0)
        return n * (32 + 8) + held + 32 * int(getattr(self.index, "nlist", 0))

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
        if allowed is not None:
            ok &= allowed[np.clip(hits >> KP_BITS, 0, None)]
        qn = np.nonzero(ok)[0]
        hit, d = hits[ok], dist[ok].astype(np.float32)
        own = hit >> KP_BITS
        kp = hit & ((1 << KP_BITS) - 1)
        spread = np.bincount(qn, minlength=len(query.desc))  # stored neighbours each query descriptor kept
        weight = np.exp(-((d / SIGMA) ** 2)) * np.log(max(2, self.count) / spread[qn])  # closeness x rarity
        # weak geometry: the rotation and the change of pyramid level each pair implies, binned
        turn, level = _pair_shape(query, self._shape_at(own, kp), qn)
        # a few thousand illustrations by their votes in all bins, then each by its best bin
        total = np.bincount(own, weights=weight, minlength=self.count)
        pre = np.argsort(-total, kind="stable")[:PRESELECT]
        pre = pre[total[pre] > 0]
        if len(pre) == 0:
            return []
        row = np.full(self.count, -1, np.int64)
        row[pre] = np.arange(len(pre))
        sel = row[own] >= 0
        qn, own, kp, d, weight, turn, level = (a[sel] for a in (qn, own, kp, d, weight, turn, level))
        flat = np.zeros(len(pre) * TURNS * LEVELS)
        base = row[own] * (TURNS * LEVELS)
        for dt in range(WINDOW):  # each pair votes in the bins of a window, so a rotation on a border is not split
            for dl in range(WINDOW):
                at = base + ((turn + dt) % TURNS) * LEVELS + np.minimum(LEVELS - 1, level + dl)
                flat += np.bincount(at, weights=weight, minlength=len(flat))
        flat = flat.reshape(len(pre), -1)
        best = flat.argmax(1)
        score = flat[np.arange(len(pre)), best]
        order = np.argsort(-score, kind="stable")[:limit]
        # the pairs of each candidate that voted in its best bin: the best stored keypoint per query keypoint, then
        # the closest query keypoint per stored keypoint (many query descriptors piling onto one stored keypoint
        # would let RANSAC take a collapse to one point for agreement)
        bt, bl = best[row[own]] // LEVELS, best[row[own]] % LEVELS
        inbin = ((bt - turn) % TURNS < WINDOW) & (bl - level >= 0) & (bl - level < WINDOW)
        qn, own, kp, d = qn[inbin], own[inbin], kp[inbin], d[inbin]
        by = np.lexsort((d, qn, own))
        qn, own, kp, d = qn[by], own[by], kp[by], d[by]
        first = np.ones(len(qn), bool)
        first[1:] = (qn[1:] != qn[:-1]) | (own[1:] != own[:-1])
        qn, own, kp, d = qn[first], own[first], kp[first], d[first]
        out = []
        for at in order:
            number = int(pre[at])
            lo, hi = np.searchsorted(own, number), np.searchsorted(own, number, side="right")
            q, s, dd = qn[lo:hi], kp[lo:hi], d[lo:hi]
            closest = np.lexsort((dd, s))
            _, once = np.unique(s[closest], return_index=True)
            q, s = q[closest[once]], s[closest[once]]
            if len(q) < MIN_PAIRS:
                continue
            src = query.xy[q]
            dst = self.xy[number][s].astype(np.float32)
            inliers, cells, transform = _ransac(src, dst, query.size)
            loose = inliers
            if inliers >= SAME_BLOCK_INLIERS and transform is not None:  # a contender: held to a tight fit
                scale = float(np.hypot(transform[0, 0], transform[1, 0]))  # stored pixels per query pixel
                inliers = _tight(src, dst, TIGHT_PX * max(1.0, scale))
            out.append(Candidate(number, inliers, len(q), float(score[at]), loose, cells, transform))
        out.sort(key=lambda c: (-c.inliers, -c.votes))
        return out

    def _shape_at(self, own: np.ndarray, kp: np.ndarray) -> np.ndarray | None:
        if self.shape is None:
            return None
        return self.shape[self._starts[own] + kp]


def _pair_shape(query: Features, stored: np.ndarray | None, qn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each pair, the rotation (bin of ``TURNS``) and the change of pyramid level (bin of ``LEVELS``) from the
    query keypoint to the stored one; all in one bin when either side has no shape (an index made before it)."""
    if stored is None or query.shape is None or len(query.shape) != len(query.desc):
        zero = np.zeros(len(qn), np.int64)
        return zero, zero
    q = query.shape[qn].astype(np.int64)
    st = stored.astype(np.int64)
    turn = ((st[:, 0] - q[:, 0]) % 256) * TURNS // 256
    level = np.clip(st[:, 1] - q[:, 1] + LEVELS // 2, 0, LEVELS - 1)
    return turn, level


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
        index.cp.niter = TRAIN_ITERATIONS  # type: ignore[attr-defined]
        index.train(train[: nlist * TRAIN_PER_LIST])  # type: ignore[attr-defined]
        index.own_fields = True  # type: ignore[attr-defined]
        quantizer.this.disown()
    xy: list[np.ndarray] = []
    shapes: list[np.ndarray] = []
    for batch in batches:
        codes, ids = [], []
        for f in batch:
            n = len(xy)
            xy.append(f.xy.astype(np.float16))
            shapes.append(f.shape if f.shape is not None else np.zeros((len(f.xy), 2), np.uint8))
            codes.append(f.desc)
            ids.append(_ids(n, len(f.desc)))
        if codes and sum(len(c) for c in codes):  # one call a batch: faiss assigns its lists on all threads at once
            index.add_with_ids(np.concatenate(codes), np.concatenate(ids))  # type: ignore[attr-defined]
    shape = np.concatenate(shapes) if shapes else np.zeros((0, 2), np.uint8)
    return FeatureIndex(index, xy, shape=shape)


def chunks(items: list[Features], size: int) -> Iterator[list[Features]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
