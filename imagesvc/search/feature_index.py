"""The inverted index of local features behind search by image, and the geometric check of its candidates.

Every stored illustration contributes its ORB descriptors (``features.py``) to one faiss binary index: exact
(``IndexBinaryFlat``) while the library is small, an inverted file (``IndexBinaryIVF``: descriptors filed under the
nearest of ``nlist`` binary centroids, a query descriptor compared only with the lists of its ``nprobe`` nearest) once
it is large. A descriptor's faiss id is ``illustration number << 12 | keypoint number``, so a hit says whose it is
and where it sits without another table.

A query's descriptors each find their ``MatchParams.neighbours_for(count)`` nearest stored descriptors; each pair
votes for its illustration, weighted by closeness and by how rare the hit is (an idf: a descriptor that hits many
illustrations, a frame corner or a hatch, says little), in the bin of the rotation and change of pyramid level the
pair implies (each keypoint's ``Features.shape``): a printing's pairs agree on one bin, a look-alike's scatter. Each
illustration is scored by its best bin, and the ``candidates`` best (and the ``by_pairs`` with most pairs in their
best bin, and the ``by_place`` with most pairs that put the query's centre at one place in them) are then verified:
RANSAC fits a similarity (``cv2.estimateAffinePartial2D``) to the pairs, and a contender is held to a homography
within ``tight_px`` (``_tight``). A printing of the same block lines up everywhere; a copy recut by another hand or a
picture of the same subject lines up only piecewise. ``same_block`` is the first rule on those counts; the rest of
the cascade is ``printings.py``. Every tuned number is a field of the ``MatchParams`` the index was given.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from imagesvc.search.features import STORED_SIDE, Features
from imagesvc.search.guided_fit import hamming
from imagesvc.search.match_params import DEFAULT, MatchParams

if TYPE_CHECKING:
    from imagesvc.search.printings import Answer

__all__ = ["Candidate", "FeatureIndex", "build_index", "hamming", "same_block"]

KP_BITS = 12  # keypoints per illustration < 4096
FLAT_UNTIL = 200_000  # descriptors (about 330 illustrations): an exact index below this, an inverted file above
TRAIN_PER_LIST = 40  # training descriptors per inverted list (faiss asks for at least 39)
TRAIN_ITERATIONS = 10  # of k-means: faiss's default 25 made training most of the build at 200,000 illustrations


@dataclass(frozen=True)
class Candidate:
    number: int  # illustration number in the index
    inliers: int  # keypoint pairs consistent with one similarity transform
    pairs: int  # keypoint pairs proposed by the descriptor search
    votes: float
    loose: int  # inliers of the similarity fit (``ransac_px``), before the tight one
    cells: int  # of the query's 4 x 4 grid, those holding an inlier: agreement over the picture, not one patch
    transform: np.ndarray | None  # 2x3, query pixels -> stored pixels


def _nlist(descriptors: int) -> int:
    """Inverted lists for ``descriptors`` stored: about 2 sqrt(n), a power of two, 1,024 to 65,536."""
    return int(min(65536, max(1024, 2 ** round(math.log2(2 * math.sqrt(descriptors))))))


def _ids(number: int, count: int) -> np.ndarray:
    return (np.int64(number) << KP_BITS) | np.arange(count, dtype=np.int64)


class FeatureIndex:
    """Searchable local features of ``count`` illustrations; ``xy[number]`` are the keypoints of one of them."""

    def __init__(
        self,
        index: object,
        xy: list[np.ndarray],
        params: MatchParams = DEFAULT,
        shape: np.ndarray | None = None,
        desc: np.ndarray | None = None,
        fine: np.ndarray | None = None,
    ) -> None:
        """``params``: the parameters every search of this index runs with (its descriptors' patch among them).
        ``shape``: every keypoint's orientation and pyramid level (``Features.shape``), illustration after
        illustration (``None``: an index made without them; votes then ignore the pairs' rotation and scale).
        ``desc``: every keypoint's descriptor in the same order (usually memory-mapped from disk: read only for the
        few illustrations a query expands from; ``None``: no expansion). ``fine``: every keypoint's ``FIT_PATCH``
        descriptor, likewise, where ``desc`` are of another patch (``Features.fine``)."""
        import faiss

        faiss.omp_set_num_threads(1)  # one query, one core: the caller's pool bounds how many run at once
        self.index = index
        self.params = params
        self._starts = np.concatenate([[0], np.cumsum([len(a) for a in xy])]).astype(np.int64)
        self._xy = np.concatenate(xy) if len(xy) else np.zeros((0, 2), np.int16)  # every keypoint, in order
        self.xy = [self._xy[a:b] for a, b in zip(self._starts[:-1], self._starts[1:], strict=True)]  # views of it
        self.count = len(xy)
        self.shape = shape
        self.desc = desc
        self.fine = fine
        if shape is not None and len(shape) != self._starts[-1]:
            raise ValueError(f"{len(shape)} keypoint shapes for {self._starts[-1]} keypoints")
        for name, rows in (("descriptors", desc), ("fine descriptors", fine)):
            if rows is not None and len(rows) != self._starts[-1]:
                raise ValueError(f"{len(rows)} {name} for {self._starts[-1]} keypoints")
        if isinstance(index, faiss.IndexBinaryIVF):
            index.nprobe = params.nprobe

    @property
    def descriptors(self) -> int:
        return int(self.index.ntotal)  # type: ignore[attr-defined]

    def memory_bytes(self) -> int:
        """Bytes held: 32 per stored code and 8 per faiss id, 4 per keypoint position, plus centroids."""
        n = self.descriptors
        held = sum(a.nbytes for a in self.xy) + (self.shape.nbytes if self.shape is not None else 0)
        return n * (32 + 8) + held + 32 * int(getattr(self.index, "nlist", 0))

    def candidates(
        self,
        query: Features,
        allowed: np.ndarray | None = None,
        limit: int | None = None,
        by_pairs: int | None = None,
        by_place: int | None = None,
        nprobe: int = 0,
    ) -> list[Candidate]:
        """The illustrations that may share a block with ``query``, verified geometrically, most inliers first.

        ``allowed``: a boolean mask over illustration numbers (``None``: all); ``nprobe``: inverted lists probed
        (0: the index's own); ``limit``, ``by_pairs``, ``by_place``: ``None`` for the index's ``params``."""
        p = self.params
        limit = p.candidates if limit is None else limit
        by_pairs = p.by_pairs if by_pairs is None else by_pairs
        by_place = p.by_place if by_place is None else by_place
        if len(query.desc) == 0 or self.descriptors == 0:
            return []
        dist, hits = self._search(query.desc, p.neighbours_for(self.count), nprobe)
        ok = (hits >= 0) & (dist <= p.max_hamming)
        if allowed is not None:
            ok &= allowed[np.clip(hits >> KP_BITS, 0, None)]
        qn = np.nonzero(ok)[0]
        hit, d = hits[ok], dist[ok].astype(np.float32)
        own = hit >> KP_BITS
        kp = hit & ((1 << KP_BITS) - 1)
        spread = np.bincount(qn, minlength=len(query.desc))  # stored neighbours each query descriptor kept
        weight = np.exp(-((d / p.sigma) ** 2)) * np.log(max(2, self.count) / spread[qn])  # closeness x rarity
        # weak geometry: the rotation and the change of pyramid level each pair implies, binned
        turn, level = _pair_shape(query, self._shape_at(own, kp), qn, p)
        # a few thousand illustrations by their votes in all bins, then each by its best bin
        total = np.bincount(own, weights=weight, minlength=self.count)
        pre = np.argsort(-total, kind="stable")[: p.preselect]
        pre = pre[total[pre] > 0]
        if len(pre) == 0:
            return []
        row = np.full(self.count, -1, np.int64)
        row[pre] = np.arange(len(pre))
        sel = row[own] >= 0
        qn, own, kp, d, weight, turn, level = (a[sel] for a in (qn, own, kp, d, weight, turn, level))
        turns, levels, window = p.turns, p.levels, p.window
        flat = np.zeros(len(pre) * turns * levels)
        base = row[own] * (turns * levels)
        for dt in range(window):  # each pair votes in the bins of a window, so a rotation on a border is not split
            for dl in range(window):
                at = base + ((turn + dt) % turns) * levels + np.minimum(levels - 1, level + dl)
                flat += np.bincount(at, weights=weight, minlength=len(flat))
        flat = flat.reshape(len(pre), -1)
        best = flat.argmax(1)
        score = flat[np.arange(len(pre)), best]
        order = np.argsort(-score, kind="stable")[:limit]
        # the pairs of each candidate that voted in its best bin: the best stored keypoint per query keypoint, then
        # the closest query keypoint per stored keypoint (many query descriptors piling onto one stored keypoint
        # would let RANSAC take a collapse to one point for agreement); a keypoint described again (further looks,
        # ``extract_query``) is one keypoint here
        bt, bl = best[row[own]] // levels, best[row[own]] % levels
        inbin = ((bt - turn) % turns < window) & (bl - level >= 0) & (bl - level < window)
        qn, own, kp, d = qn[inbin], own[inbin], kp[inbin], d[inbin]
        kq = qn if query.keypoint is None else query.keypoint[qn]
        by = np.lexsort((d, kq, own))
        qn, own, kp, d, kq = qn[by], own[by], kp[by], d[by], kq[by]
        first = np.ones(len(qn), bool)
        first[1:] = (kq[1:] != kq[:-1]) | (own[1:] != own[:-1])
        qn, own, kp, d = qn[first], own[first], kp[first], d[first]
        if by_pairs > 0:
            order = _and_best(order, np.bincount(row[own], minlength=len(pre)), by_pairs, p.min_pairs)
        placed = self._by_place(query, qn, own, kp, row, len(pre)) if by_place > 0 else None
        if placed is not None:
            order = _and_best(order, placed, by_place, p.min_pairs)
        out = []
        for at in order:
            number = int(pre[at])
            lo, hi = np.searchsorted(own, number), np.searchsorted(own, number, side="right")
            q, s, dd = qn[lo:hi], kp[lo:hi], d[lo:hi]
            closest = np.lexsort((dd, s))
            _, once = np.unique(s[closest], return_index=True)
            q, s = q[closest[once]], s[closest[once]]
            if len(q) < p.min_pairs:
                continue
            src = query.xy[q]
            dst = self.xy[number][s].astype(np.float32)
            inliers, cells, transform = _ransac(src, dst, query.size, p)
            loose = inliers
            if inliers >= p.same_block_inliers and transform is not None:  # a contender: held to a tight fit
                scale = float(np.hypot(transform[0, 0], transform[1, 0]))  # stored pixels per query pixel
                inliers = _tight(src, dst, p.tight_px * max(1.0, scale))
            out.append(Candidate(number, inliers, len(q), float(score[at]), loose, cells, transform))
        out.sort(key=lambda c: (-c.inliers, -c.votes))
        return out

    def _search(self, desc: np.ndarray, k: int, nprobe: int) -> tuple[np.ndarray, np.ndarray]:
        import faiss

        if nprobe > 0 and isinstance(self.index, faiss.IndexBinaryIVF):
            return self.index.search(desc, k, params=faiss.SearchParametersIVF(nprobe=nprobe))
        return self.index.search(desc, k)  # type: ignore[attr-defined]

    def _by_place(
        self, query: Features, qn: np.ndarray, own: np.ndarray, kp: np.ndarray, row: np.ndarray, n: int
    ) -> np.ndarray | None:
        """Per preselected illustration (``row[own]``, ``n`` of them), the most of its pairs (``qn``, ``own``,
        ``kp``) that agree on where the query's centre falls in it. Each pair's rotation and change of scale (its
        keypoints' orientations and pyramid levels) carry the query's centre from the query keypoint to a stored
        position; a printing's pairs put it in one place, while chance pairs of a look-alike that share a rotation
        bin scatter over the picture. ``None`` for an index or a query without keypoint shapes."""
        if self.shape is None or query.shape is None or len(query.shape) != len(query.desc) or not len(qn):
            return None
        at = self._starts[own] + kp
        stored, mine = self.shape[at].astype(np.float64), query.shape[qn].astype(np.float64)
        angle = (stored[:, 0] - mine[:, 0]) * (2 * np.pi / 256)
        scale = 1.2 ** (stored[:, 1] - mine[:, 1])
        cos, sin = np.cos(angle) * scale, np.sin(angle) * scale
        v = query.xy[qn].astype(np.float64) - np.array(query.size, np.float64) / 2
        place = self._xy[at].astype(np.float64)
        place[:, 0] -= cos * v[:, 0] - sin * v[:, 1]
        place[:, 1] -= sin * v[:, 0] + cos * v[:, 1]
        px = self.params.place_px
        span = 4 * STORED_SIDE // px  # cells across, the picture in the middle and as much around it
        cell = np.clip(np.floor(place / px).astype(np.int64) + span // 4, 0, span - 2)
        keys = [(row[own] * span + cell[:, 0] + dx) * span + cell[:, 1] + dy for dx in (0, 1) for dy in (0, 1)]
        found, counts = np.unique(np.concatenate(keys), return_counts=True)
        out = np.zeros(n, np.int64)
        np.maximum.at(out, found // (span * span), counts)
        return out

    def features_of(self, number: int) -> Features:
        """The stored features of illustration ``number`` (needs ``desc``), as a query of its own."""
        if self.desc is None:
            raise ValueError("this index keeps no descriptors beside it")
        lo, hi = self._starts[number], self._starts[number + 1]
        xy = self.xy[number].astype(np.float32)
        size = (int(xy[:, 0].max()) + 1, int(xy[:, 1].max()) + 1) if len(xy) else (0, 0)
        shape = self.shape[lo:hi] if self.shape is not None else None
        fine = np.ascontiguousarray(self.fine[lo:hi]) if self.fine is not None else None
        return Features(xy, np.ascontiguousarray(self.desc[lo:hi]), size, shape, fine=fine)

    def search(self, query: Features, allowed: np.ndarray | None = None) -> list[Candidate]:
        """The illustrations printed from the query's block, most pairs first (``printings.find_printings``)."""
        return self.match(query, allowed).same_block

    def match(self, query: Features, allowed: np.ndarray | None = None) -> Answer:
        """The printings of the query's block and, apart, the verified candidates that are possible printings."""
        from imagesvc.search.printings import find_printings

        return find_printings(self, query, allowed, self.params)

    def _shape_at(self, own: np.ndarray, kp: np.ndarray) -> np.ndarray | None:
        if self.shape is None:
            return None
        return self.shape[self._starts[own] + kp]


def _and_best(order: np.ndarray, pairs: np.ndarray, more: int, least: int) -> np.ndarray:
    """``order`` (preselected rows to verify) and the ``more`` others with the most ``pairs`` (at least ``least``);
    ``pairs`` is written over."""
    pairs[order] = -1
    best = np.argsort(-pairs, kind="stable")[:more]
    return np.concatenate([order, best[pairs[best] >= least]])


def _pair_shape(
    query: Features, stored: np.ndarray | None, qn: np.ndarray, p: MatchParams
) -> tuple[np.ndarray, np.ndarray]:
    """For each pair, the rotation (bin of ``turns``) and the change of pyramid level (bin of ``levels``) from the
    query keypoint to the stored one; all in one bin when either side has no shape (an index made before it)."""
    if stored is None or query.shape is None or len(query.shape) != len(query.desc):
        zero = np.zeros(len(qn), np.int64)
        return zero, zero
    q = query.shape[qn].astype(np.int64)
    st = stored.astype(np.int64)
    turn = ((st[:, 0] - q[:, 0]) % 256) * p.turns // 256
    level = np.clip(st[:, 1] - q[:, 1] + p.levels // 2, 0, p.levels - 1)
    return turn, level


def same_block(found: list[Candidate], p: MatchParams) -> list[Candidate]:
    """The candidates printed from the query's block: enough pairs in the tight fit, and not far fewer than the best
    candidate's (a recut copy agrees piecewise: a fraction of what a printing of the block does)."""
    if not found:
        return []
    best = max(c.inliers for c in found)
    return [
        c
        for c in found
        if c.inliers >= p.same_block_inliers
        and c.inliers >= p.same_block_ratio * best
        and c.cells >= p.same_block_cells
    ]


def _ransac(
    src: np.ndarray, dst: np.ndarray, size: tuple[int, int], p: MatchParams
) -> tuple[int, int, np.ndarray | None]:
    """Inliers of the best similarity (each query and each stored keypoint counted once), the query grid cells
    they fall in, and the transform."""
    import cv2

    m, mask = cv2.estimateAffinePartial2D(
        src, dst, method=cv2.RANSAC, ransacReprojThreshold=p.ransac_px, maxIters=1000, confidence=0.995
    )
    if m is None or mask is None:
        return 0, 0, None
    scale = float(np.hypot(m[0, 0], m[1, 0]))
    if not p.min_scale <= scale <= 1 / p.min_scale:  # no printing is 20 times larger or smaller than a query of it
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
    batches: Iterable[list[Features]],
    total_descriptors: int,
    train: np.ndarray | None = None,
    keep_desc: bool = False,
    params: MatchParams = DEFAULT,
    flat_until: int = FLAT_UNTIL,
) -> FeatureIndex:
    """A ``FeatureIndex`` of the features in ``batches`` (numbered in order); ``train``: a sample of descriptors for
    the inverted file's centroids (needed above ``flat_until`` descriptors). ``keep_desc``: the descriptors also
    kept beside it, in memory (a small library; a large one maps them from disk, ``block_index``)."""
    import faiss

    if total_descriptors <= flat_until:
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
    kept: list[np.ndarray] = []
    kept_fine: list[np.ndarray] = []
    for batch in batches:
        codes, ids = [], []
        for f in batch:
            n = len(xy)
            xy.append(f.xy.astype(np.float16))
            shapes.append(f.shape if f.shape is not None else np.zeros((len(f.xy), 2), np.uint8))
            codes.append(f.desc)
            ids.append(_ids(n, len(f.desc)))
            if keep_desc:
                kept.append(f.desc)
                if f.fine is not None:
                    kept_fine.append(f.fine)
        if codes and sum(len(c) for c in codes):  # one call a batch: faiss assigns its lists on all threads at once
            index.add_with_ids(np.concatenate(codes), np.concatenate(ids))  # type: ignore[attr-defined]
    shape = np.concatenate(shapes) if shapes else np.zeros((0, 2), np.uint8)
    desc = (np.concatenate(kept) if kept else np.zeros((0, 32), np.uint8)) if keep_desc else None
    fine = np.concatenate(kept_fine) if keep_desc and kept_fine else None
    if fine is not None and desc is not None and len(fine) != len(desc):
        raise ValueError("some illustrations' features have fine descriptors and others none")
    return FeatureIndex(index, xy, params, shape=shape, desc=desc, fine=fine)


def chunks(items: list[Features], size: int) -> Iterator[list[Features]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
