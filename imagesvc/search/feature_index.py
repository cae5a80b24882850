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
illustration is scored by its best bin, and the ``CANDIDATES`` best (and the ``BY_PAIRS`` with most pairs in their
best bin: a small crop's pairs are many but weak, so few votes; and the ``BY_PLACE`` with most pairs that put the
query's centre at one place in them, a Hough vote on position) are then verified geometrically on that bin's pairs:
RANSAC fits a 4-degree-of-freedom similarity (scale, rotation, shift; ``cv2.estimateAffinePartial2D``) to the
query-to-stored keypoint pairs, and the pairs that agree with it (inliers) are counted. A printing of the same block
lines up everywhere; a copy recut by another hand or a picture of the same subject lines up only piecewise, so few pairs
agree. ``same_block`` needs ``SAME_BLOCK_INLIERS`` pairs within ``TIGHT_PX`` of one homography (``_tight``) and a
fraction ``SAME_BLOCK_RATIO`` of the best candidate's, spread over ``SAME_BLOCK_CELLS`` of the query's 4 x 4 cells.

``FeatureIndex.search`` (what a query runs) adds two steps that read each stored illustration's own descriptors,
kept beside the index (``desc`` and ``fine``, memory-mapped): *guided matching* when no candidate is the same block
(a small crop: pairs made by position through each best candidate's similarity, ``_guided``), and *expansion* (the
best illustration found, whole, queried again: it finds the block's other printings as a full scan would).
Candidates are found with descriptors of a wide patch (``features.DESCRIPTOR_PATCH``); every guided fit compares
ORB's own narrow ones (``Features.fit_desc``), in which a recut copy's strokes, a pixel or two off, differ from a
printing's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from imagesvc.search import features
from imagesvc.search.features import STORED_SIDE, Features, near_pairs

__all__ = ["Candidate", "FeatureIndex", "build_index", "hamming", "use_patch"]

KP_BITS = 12  # keypoints per illustration < 4096
K = 0  # stored neighbours per query descriptor; 0: ``neighbours(count)``
K_PER = 40  # illustrations per neighbour: look-alikes of a printing grow with the library, so must K
K_MIN, K_MAX = 24, 256
MAX_HAMMING = 60  # of 256 bits: a farther neighbour is no match (``DISTANCES``: set with the patch)
SIGMA = 24.0  # bits: a pair's vote falls off as exp(-(distance / SIGMA)^2)
TURNS = 16  # bins of the rotation a pair implies (22.5 degrees each) ...
LEVELS = 17  # ... and of its change of pyramid level (-8 to +8, 1.2x each)
WINDOW = 3  # bins a pair votes in along each (neighbours included: a pair's own estimate is rough)
PRESELECT = 4000  # illustrations kept by their total votes before each is scored by its best bin
CANDIDATES = 400  # verified by RANSAC per query (about 0.4 ms each), the best by their votes ...
BY_PAIRS = 100  # ... and these too, the most by their pairs in the best bin (a crop's pairs are many but weak) ...
BY_PLACE = 100  # ... and these, the most by their pairs that also agree on where the query's centre falls
PLACE_PX = 48  # stored pixels: the cells of that position (each pair counts in a block of 2 x 2 of them)
MIN_PAIRS = 6
MIN_SCALE = 0.05  # query-to-stored scale of a plausible transform, and its inverse
RANSAC_PX = 8.0  # reprojection error allowed, pixels of the stored (reduced) illustration
TIGHT_PX = 2.5  # ... and in the tight fit that decides same_block, pixels of the query (or of the stored, if finer)
SAME_BLOCK_INLIERS = 12
SAME_BLOCK_RATIO = 0.2
SAME_BLOCK_CELLS = 2  # of the query's 4 x 4 cells holding an inlier: agreement over the picture, not in one patch
EXPAND_FROM = 1  # best same_block illustrations whose own stored features are queried again (0: none)
EXPAND_CANDIDATES = 50  # verified for such a query: a whole printing's own are at the top (400 cost 30% more)
EXPAND_NPROBE = 4  # inverted lists probed for it (0: the index's own)
EXPAND_CHECKED = 5  # ... of which the best are also matched by position (``_printings_like``)
GUIDED_CANDIDATES = 20  # when none is same_block: the best candidates matched again, guided by their similarity
GUIDED_PX = 6.0  # a stored keypoint pairs with query keypoints the similarity puts within this many stored pixels
GUIDED_HAMMING = 64  # ... and whose descriptors differ by at most this many bits
GUIDED_ROUNDS = 2  # of guided matching: by the similarity, then by the homography fitted to its pairs
GUIDED_GRID = 8  # the query's cells (GUIDED_GRID x GUIDED_GRID) in which the tight fit's pairs are counted
GUIDED_AGREE = 0.4  # of the pairs found by position, the fraction a printing's tight fit keeps (a recut's: ~0.3)
CONFIRM_AGREE = 0.5  # ... and that a candidate held to the best (``_confirmed``) keeps (printings: 0.56 or more)
CONFIRM_STRETCH = 1.15  # ... whose fit stretches at most this much more or less than the best's
GUIDED_PAIRS = 20  # a candidate found by guided pairs alone is the same block with this many in the tight fit ...
GUIDED_CELLS = 12  # ... spread over at least this many of the query's cells (shared lines cover few)
GUIDED_STRETCH = 1.05  # ... and a fit nearly a similarity (a block of the same subject at another aspect is not)
GUIDED_FEWER_CELLS = 10  # ... or over this many cells when ...
GUIDED_STRONG = 15  # ... this many of the pairs are within STRONG_HAMMING bits (same pixels, not shared lines)
STRONG_HAMMING = 32
NEAR_PAIRS = 15  # short of that rule, a candidate with this many pairs in the tight fit ...
NEAR_CELLS = 7  # ... over this many cells (and the same stretch) is the same block when another such one ...
SIBLING_PAIRS = 60  # ... agrees with it, matched whole to whole through the query, in this many tight pairs ...
SIBLING_CELLS = 20  # ... over this many of its cells: two printings of one block (different blocks: <= 22 over 9)
CLOSE_PAIRS = 12  # short of NEAR_PAIRS, a candidate with this many pairs in the tight fit ...
CLOSE_CELLS = 5  # ... over this many cells ...
CLOSE_STRETCH = 1.15  # ... and a fit this near a similarity ...
CLOSE_STRONG = 0.3  # ... with this share of its pairs near twins is the same block when a printing of its own block,
# found by its own search (``_printings_like``), fits the query through it as closely, stretched alike
# (``_corroborated``)
CORROBORATE_FROM = 1  # close candidates so searched, the closest first: the closest alone (``_corroborated``)
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


class Fit(NamedTuple):
    """A guided fit of a query to a stored illustration (``_guided_fit``)."""

    proposed: int  # pairs made by position
    tight: int  # of them, within TIGHT_PX of one homography
    cells: int  # of the query's GUIDED_GRID x GUIDED_GRID cells holding a tight pair
    stretch: float  # of the homography at the query's centre (1.0: a similarity)
    strong: int  # tight pairs whose descriptors differ by at most STRONG_HAMMING bits

    def same_block(self) -> bool:
        """Whether this fit alone shows the same block (``_guided``)."""
        return (
            self.tight >= GUIDED_PAIRS
            and self.stretch <= GUIDED_STRETCH
            and (self.cells >= GUIDED_CELLS or (self.cells >= GUIDED_FEWER_CELLS and self.strong >= GUIDED_STRONG))
        )

    def sibling(self) -> bool:
        """Whether a whole printing fitted to another agrees with it as two printings of one block do
        (``SIBLING_PAIRS`` over ``SIBLING_CELLS``; two different blocks of one subject: at most 22 over 9)."""
        return self.tight >= SIBLING_PAIRS and self.cells >= SIBLING_CELLS

    def near(self) -> bool:
        """Whether it comes close: the same block if a sibling printing agrees (``_siblings``)."""
        return self.tight >= NEAR_PAIRS and self.cells >= NEAR_CELLS and self.stretch <= GUIDED_STRETCH

    def close(self) -> bool:
        """Whether it comes closer than chance: the same block if a printing of its own block, found by its own
        search, comes as close to the query through it (``_corroborated``)."""
        return (
            self.tight >= CLOSE_PAIRS
            and self.cells >= CLOSE_CELLS
            and self.stretch <= CLOSE_STRETCH
            and self.strong >= CLOSE_STRONG * self.tight
        )


NO_FIT = Fit(0, 0, 0, math.inf, 0)


# The Hamming distances of this module (MAX_HAMMING, SIGMA, GUIDED_HAMMING, STRONG_HAMMING) for each descriptor
# patch (``features.DESCRIPTOR_PATCH``): chosen for 19 px; for 41 px the index's are 1.5 times as far, as a
# printing's pairs are (the median of a crop's true pairs 37 -> 54 bits, docs/benchmarks.md), and the guided fits'
# stay 19 px's, as they compare 19 px descriptors (``features.FIT_PATCH``). Not chosen for any other patch.
DISTANCES = {19: (40, 16.0, 64, 32), 41: (60, 24.0, 64, 32)}


def use_patch(patch: int) -> None:
    """Describe and match with descriptors of ``patch`` px (a key of ``DISTANCES``), in this process: the features
    extracted from now on and the distances they are matched at. An index holds one patch's descriptors."""
    if patch not in DISTANCES:
        raise ValueError(f"no distances chosen for a {patch} px patch: one of {sorted(DISTANCES)}")
    global MAX_HAMMING, SIGMA, GUIDED_HAMMING, STRONG_HAMMING
    features.DESCRIPTOR_PATCH = patch
    MAX_HAMMING, SIGMA, GUIDED_HAMMING, STRONG_HAMMING = DISTANCES[patch]


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
        self,
        index: object,
        xy: list[np.ndarray],
        nprobe: int = NPROBE,
        shape: np.ndarray | None = None,
        desc: np.ndarray | None = None,
        fine: np.ndarray | None = None,
    ) -> None:
        """``shape``: every keypoint's orientation and pyramid level (``Features.shape``), illustration after
        illustration (``None``: an index made without them; votes then ignore the pairs' rotation and scale).
        ``desc``: every keypoint's descriptor in the same order (usually memory-mapped from disk: read only for the
        few illustrations a query expands from; ``None``: no expansion). ``fine``: every keypoint's ``FIT_PATCH``
        descriptor, likewise, where ``desc`` are of another patch (``Features.fine``)."""
        import faiss

        faiss.omp_set_num_threads(1)  # one query, one core: the caller's pool bounds how many run at once
        self.index = index
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
        self,
        query: Features,
        allowed: np.ndarray | None = None,
        limit: int = CANDIDATES,
        by_pairs: int = BY_PAIRS,
        by_place: int = BY_PLACE,
        nprobe: int = 0,
    ) -> list[Candidate]:
        """The illustrations that may share a block with ``query``, verified geometrically, most inliers first.

        ``allowed``: a boolean mask over illustration numbers (``None``: all); ``nprobe``: inverted lists probed
        (0: the index's own)."""
        if len(query.desc) == 0 or self.descriptors == 0:
            return []
        k = K or neighbours(self.count)
        dist, hits = self._search(query.desc, k, nprobe)
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
        # would let RANSAC take a collapse to one point for agreement); a keypoint described again (further looks,
        # ``extract_query``) is one keypoint here
        bt, bl = best[row[own]] // LEVELS, best[row[own]] % LEVELS
        inbin = ((bt - turn) % TURNS < WINDOW) & (bl - level >= 0) & (bl - level < WINDOW)
        qn, own, kp, d = qn[inbin], own[inbin], kp[inbin], d[inbin]
        kq = qn if query.keypoint is None else query.keypoint[qn]
        by = np.lexsort((d, kq, own))
        qn, own, kp, d, kq = qn[by], own[by], kp[by], d[by], kq[by]
        first = np.ones(len(qn), bool)
        first[1:] = (kq[1:] != kq[:-1]) | (own[1:] != own[:-1])
        qn, own, kp, d = qn[first], own[first], kp[first], d[first]
        if by_pairs > 0:
            order = _and_best(order, np.bincount(row[own], minlength=len(pre)), by_pairs)
        placed = self._by_place(query, qn, own, kp, row, len(pre)) if by_place > 0 else None
        if placed is not None:
            order = _and_best(order, placed, by_place)
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
        span = 4 * STORED_SIDE // PLACE_PX  # cells across, the picture in the middle and as much around it
        cell = np.clip(np.floor(place / PLACE_PX).astype(np.int64) + span // 4, 0, span - 2)
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
        """The illustrations printed from the query's block, most pairs first.

        1. ``same_block`` of the query's candidates (pairs from the index's neighbours), each held to the best of
           them by its pairs found by position (``_confirmed``);
        2. when none is, the best candidates matched again by position (``_guided``): a small crop; a candidate
           that comes close counts when another does too and the two are printings of one block (``_siblings``),
           or when a printing of its block that its own search finds fits the query through it (``_corroborated``);
        3. *expansion*: the best of them, whole, as a query of its own (its stored features, ``desc``); the
           illustrations it finds to be the same block are listed too when their pairs with the query (guided by
           the transform through the seed) pass the rule of ``same_block`` and most of them agree (``GUIDED_AGREE``).
           A third of each side holds a ninth of a printing's keypoints and often finds one printing of the block;
           that printing, whole, finds the others as surely as a full scan would.

        Without ``desc`` (an index made before it was kept), step 1 only."""
        considered = self.candidates(query, allowed)
        found = same_block(considered)
        if self.desc is None:
            return found
        query = query.first_look()  # matched by position from here: each place once
        fits: dict[int, Fit] = {}  # guided fits to the query by the candidates' own transforms, each made once
        printings: dict[int, list[Candidate]] = {}  # each searched candidate's printings (``_printings_of``)
        if found:
            found = self._confirmed(query, found, fits)
        else:
            found = self._guided(query, considered[:GUIDED_CANDIDATES], fits)
            if not found:
                found = self._corroborated(query, considered[:GUIDED_CANDIDATES], fits, allowed, printings)
        if not found or EXPAND_FROM <= 0:
            return found
        seen = {c.number for c in found}
        more: list[Candidate] = []
        for seed in found[:EXPAND_FROM]:
            if seed.transform is None:
                continue
            for c in self._printings_of(seed.number, allowed, printings):
                if c.number in seen or c.transform is None:
                    continue
                seen.add(c.number)
                through = _compose(c.transform, seed.transform)  # query -> seed -> this one
                fit = _guided_fit(query, self.features_of(c.number), through)
                more.append(Candidate(c.number, fit.tight, fit.proposed, c.votes, c.loose, fit.cells, through))
        if not more:
            return sorted(found, key=lambda c: -c.inliers)
        # held to the query as the query's own are, on the same footing (the seed's pairs found by position too): a
        # recut found by the seed agrees with the query piecewise only, in few of its pairs and far fewer than the seed
        seed = found[0]
        best = max(c.inliers for c in found + more)
        if seed.transform is not None:
            best = max(best, self._query_fit(query, seed, fits).tight)
        found += [
            c
            for c in more
            if c.inliers >= SAME_BLOCK_INLIERS
            and c.inliers >= SAME_BLOCK_RATIO * best
            and c.inliers >= GUIDED_AGREE * c.pairs
        ]
        found.sort(key=lambda c: -c.inliers)  # stable: the query's own order among equals
        return found

    def _query_fit(self, query: Features, c: Candidate, fits: dict[int, Fit]) -> Fit:
        """The guided fit of ``query`` to candidate ``c`` by its own transform, made once a query (``fits``)."""
        if c.number not in fits:
            assert c.transform is not None
            fits[c.number] = _guided_fit(query, self.features_of(c.number), c.transform)
        return fits[c.number]

    def _printings_of(
        self, number: int, allowed: np.ndarray | None, printings: dict[int, list[Candidate]]
    ) -> list[Candidate]:
        """The other printings of illustration ``number``'s block that its own stored features find among the
        ``allowed`` (``_printings_like``), each with its transform from ``number``'s pixels; searched once a query
        (``printings``)."""
        if number not in printings:
            mask = np.ones(self.count, bool) if allowed is None else allowed.copy()
            mask[number] = False
            whole = self.features_of(number)
            considered = self.candidates(whole, mask, EXPAND_CANDIDATES, 0, 0, EXPAND_NPROBE)
            printings[number] = self._printings_like(whole, considered)
        return printings[number]

    def _printings_like(self, whole: Features, considered: list[Candidate]) -> list[Candidate]:
        """The candidates of a whole printing's own search (``whole``) that are printings of its block: of the
        ``same_block`` ones and the ``EXPAND_CHECKED`` best, those that agree with it by position as two printings
        of one block do (``SIBLING_PAIRS`` over ``SIBLING_CELLS``). In a large library a printing's nearest
        descriptors are crowded by look-alikes, so its sibling can come first with 11 pairs from the index (at
        200,000 illustrations) where by position the two agree in hundreds; and a picture of the same subject
        drawn to the same outline can pass ``same_block`` on the index's pairs (21 in 3 cells beside a sibling's
        82 in 7, on the demo library) where by position it agrees along the outline only (34 pairs in 5 cells,
        the sibling 180 in 28)."""
        same = {c.number for c in same_block(considered)}
        found = []
        for rank, c in enumerate(considered):
            if c.transform is None or (c.number not in same and rank >= EXPAND_CHECKED):
                continue
            if _guided_fit(whole, self.features_of(c.number), c.transform).sibling():
                found.append(c)
        return found

    def _confirmed(self, query: Features, found: list[Candidate], fits: dict[int, Fit]) -> list[Candidate]:
        """Of several ``same_block`` candidates, those whose fit by position (``_guided_fit``) agrees with the best
        one's (the one with most pairs in it). The index's pairs are a sample, and a picture of the same subject
        can draw a few more of them than its share (19 in 3 cells beside a printing's 71, at 10,000
        illustrations); by position a printing's pairs then number in the hundreds and the look-alike's in the
        tens (a ratio under 0.14, every printing's 0.23 or more). Two printings of one block differ by a
        similarity, so the query's fits to them stretch alike (within 1.08 of each other at 10,000 illustrations),
        where a recut or a picture of the same subject fits with a stretch of its own (1.28 to 1.51 apart) or keeps
        fewer of its pairs in the fit (``CONFIRM_AGREE``: a recut's 0.45). The fits made are kept in ``fits``.

        Those held are then held to the best's block by how cleanly they fit (``_clean_as_the_block``), not by
        agreeing with the best whole to whole: a recut and its original agree in 46 pairs or fewer where printings
        agree in 167 or more, but a crop of a motif that two pictures share at another scale (the demo library's
        suns) then lost its own picture whenever the other fitted it better (docs/search.md, step 5)."""
        if len(found) < 2:
            return found
        fitted = [self._query_fit(query, c, fits) if c.transform is not None else NO_FIT for c in found]
        best = max(fitted, key=lambda f: f.tight)
        if not best.tight:  # no fit to hold them to: as the index's pairs found them
            return found
        held = [
            (c, f)
            for c, f in zip(found, fitted, strict=True)
            if f is best
            or (
                f.tight >= SAME_BLOCK_RATIO * best.tight
                and f.tight >= CONFIRM_AGREE * f.proposed
                and _stretch_alike(f.stretch, best.stretch)
            )
        ]
        return self._clean_as_the_block(held, best)

    def _clean_as_the_block(self, held: list[tuple[Candidate, Fit]], best: Fit) -> list[Candidate]:
        """Of candidates held to the best fit, those that fit the query as cleanly as the printings of the best's
        block do (the best and the candidates that agree with it whole to whole, ``_agree_whole``): as large a share
        of their pairs by position in the tight fit, and as large a share of those near twins (``STRONG_HAMMING``).

        A recut cut close to its original can fit a crop with as many pairs and cells as a printing, but its strokes
        lie a pixel or two off: on the test library's crops, where a recut passed the rules above, either fewer of
        its pairs were near twins (0.33 to 0.48 of them; the printings' 0.50 or more) or fewer of its pairs kept to
        the tight fit (0.50 to 0.61; the printings' 0.79 or more). A picture that holds the same motif at another
        scale (the demo library's suns) fits as cleanly as the block, and stays though it agrees with it in part
        only."""
        first = next(c for c, f in held if f is best)
        clean = {c.number: (f.tight / max(1, f.proposed), f.strong / max(1, f.tight)) for c, f in held}
        floor = clean[first.number]
        unsure, siblings = [], 0
        for c, _f in held:
            agree, share = clean[c.number]
            if agree >= floor[0] and share >= floor[1]:
                continue  # as clean as the best: kept, and it lowers no floor
            if self._agree_whole(first, c).sibling():
                floor = (min(floor[0], agree), min(floor[1], share))
                siblings += 1
            else:
                unsure.append(c.number)
        if not siblings:  # the best alone shows no block to measure against: it may be another picture itself
            return [c for c, _f in held]
        return [
            c
            for c, _f in held
            if c.number not in unsure or (clean[c.number][0] >= floor[0] and clean[c.number][1] >= floor[1])
        ]

    def _guided(self, query: Features, considered: list[Candidate], fits: dict[int, Fit]) -> list[Candidate]:
        """The best of ``considered`` matched again against its own stored keypoints where its similarity puts
        the query (guided matching: every stored keypoint in the query's footprint, not only the few that came
        back among the index's neighbours), as a list of one when it is the same block, else empty.

        A third of each side of a printing holds ~70 of its stored keypoints, about half of which pair with the
        query, but only a quarter of those pairs come back from the index (generic strokes crowd them out); here
        they are found by position. A block of the same subject agrees along the shared frame and outline only, so
        its pairs fill few of the query's cells, while a printing's fill most of them. The fits made are kept in
        ``fits``."""
        best: tuple[Fit, Candidate] | None = None
        near: list[tuple[Fit, Candidate]] = []
        for c in considered:
            if c.transform is None:
                continue
            fit = self._query_fit(query, c, fits)
            if fit.same_block():
                if best is None or (fit.cells, fit.tight) > (best[0].cells, best[0].tight):
                    best = (fit, c)
            elif fit.near():
                near.append((fit, c))
        if best is not None:
            return [_found(*best)]
        return self._siblings(sorted(near, key=lambda n: (n[0].cells, n[0].tight), reverse=True))

    def _siblings(self, near: list[tuple[Fit, Candidate]]) -> list[Candidate]:
        """Of the candidates that came close to the guided rule (``near``, best first), the first two that are
        printings of one block, found by matching them whole to whole through the query (the first's transform
        undone, the second's applied), else empty.

        A third of each side sometimes holds too little of a printing for one guided fit to be sure, yet two
        printings of its block both come close; two printings of one block then agree all over (175 or more tight
        pairs in 37 or more cells at 10,000 illustrations), while two different blocks of one subject agree along
        their shared frame and outline only (at most 22 pairs, 9 cells). A block of the same subject printed once
        has no such sibling, which is what keeps its near fit out."""
        for i, (fit, a) in enumerate(near):
            for other_fit, b in near[i + 1 :]:
                if self._agree_whole(a, b).sibling():
                    return [_found(fit, a), _found(other_fit, b)]
        return []

    def _agree_whole(self, a: Candidate, b: Candidate) -> Fit:
        """Candidates ``a`` and ``b`` of one query matched whole to whole through it (``a``'s transform undone,
        ``b``'s applied): two printings of one block agree all over (``Fit.sibling``), where a recut or another
        block agrees piecewise."""
        if a.transform is None or b.transform is None:
            return NO_FIT
        undo = np.linalg.inv(np.vstack([a.transform, [0.0, 0.0, 1.0]]))[:2]
        return _guided_fit(self.features_of(a.number), self.features_of(b.number), _compose(b.transform, undo))

    def _corroborated(
        self,
        query: Features,
        considered: list[Candidate],
        fits: dict[int, Fit],
        allowed: np.ndarray | None,
        printings: dict[int, list[Candidate]],
    ) -> list[Candidate]:
        """The candidate that comes ``close`` first (most cells, then pairs) with a printing of its own block (found
        by its own search, ``_printings_of``) that comes as close to the query through it, stretched alike: the
        two, else empty. Only the closest is searched (``CORROBORATE_FROM``): on the demo library a botanical
        plate's middle third came closest to its own picture (21 pairs over 9 cells; printed once) and close to an
        engraving of another subject (18 over 7) whose sibling printing came as close, so searching the next ones
        too listed the engravings; at 200,000 illustrations it found one more printing in 80 third crops.

        A crop of a sparse part of a printing (a third of each side of open sky or blank ground) holds a few dozen
        keypoints, and its block's other printings are often not among its candidates at all, so ``_siblings``
        has nothing to pair. The one printing that is can still fit it closely, and that printing, whole, finds
        its siblings as surely as a full scan would; through it, a sibling may fit the query better than the query's
        own search could show (14 pairs over 5 cells for one, 24 over 10 for its sibling, at 200,000
        illustrations). A picture of the same subject printed once fits as closely at times (31 pairs over 7
        cells) and has no sibling: nothing corroborates it. A block printed twice whose lines only run alike (the
        demo library's sun, drawn twice, against an engraving's arc and line) fits in pairs that are seldom near
        twins: 0.23 and 0.24 of them, hence ``CLOSE_STRONG`` 0.3. Printings' shares run lower than one would like
        (at 10,000 illustrations 0.3 cost one third crop of 70 its corroboration, 0.5 cost two), so the margin is
        thin; the 200,000 figures are in docs/benchmarks.md.
        Both fits of the two are held only to ``close``: on a sparse crop a printing's fit stretches up to 1.15
        and fills 5 to 7 cells, and asking the second for a ``near`` fit (15 pairs, 7 cells, 1.05) found 0.797 of
        the printings of third crops 81 to 160 of the benchmark at 200,000 instead of 0.832."""
        close = []
        for c in considered:
            fit = fits.get(c.number)
            if c.transform is not None and fit is not None and fit.close():
                close.append((fit, c))
        close.sort(key=lambda n: (n[0].cells, n[0].tight), reverse=True)
        for fit, c in close[:CORROBORATE_FROM]:
            assert c.transform is not None
            for s in self._printings_of(c.number, allowed, printings):
                if s.transform is None:
                    continue
                through = _compose(s.transform, c.transform)  # query -> c -> its sibling
                agree = _guided_fit(query, self.features_of(s.number), through)
                if agree.close() and _stretch_alike(agree.stretch, fit.stretch):
                    sibling = Candidate(s.number, agree.tight, agree.proposed, s.votes, s.loose, agree.cells, through)
                    return [_found(fit, c), sibling]  # ``c`` first: expanded from, its printings already searched
        return []

    def _shape_at(self, own: np.ndarray, kp: np.ndarray) -> np.ndarray | None:
        if self.shape is None:
            return None
        return self.shape[self._starts[own] + kp]


def _found(fit: Fit, c: Candidate) -> Candidate:
    """``c`` as found by its guided fit."""
    return Candidate(c.number, fit.tight, fit.proposed, c.votes, c.loose, fit.cells, c.transform)


def _and_best(order: np.ndarray, pairs: np.ndarray, more: int) -> np.ndarray:
    """``order`` (preselected rows to verify) and the ``more`` others with the most ``pairs`` (at least
    ``MIN_PAIRS``); ``pairs`` is written over."""
    pairs[order] = -1
    best = np.argsort(-pairs, kind="stable")[:more]
    return np.concatenate([order, best[pairs[best] >= MIN_PAIRS]])


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
    return [
        c
        for c in found
        if c.inliers >= SAME_BLOCK_INLIERS and c.inliers >= SAME_BLOCK_RATIO * best and c.cells >= SAME_BLOCK_CELLS
    ]


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


_POPCOUNT = np.array([bin(b).count("1") for b in range(256)], np.uint8)


def hamming(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bits apart of descriptor rows ``a`` and ``b`` (uint8, 32 bytes each; broadcast as numpy broadcasts)."""
    return _POPCOUNT[np.bitwise_xor(a, b)].sum(-1, dtype=np.int32)


def _compose(second: np.ndarray, first: np.ndarray) -> np.ndarray:
    """The 2x3 transform that applies ``first`` then ``second``."""
    return second[:, :2] @ first + np.hstack([np.zeros((2, 2)), second[:, 2:]])


def _guided_fit(query: Features, stored: Features, transform: np.ndarray) -> Fit:
    """Pairs of ``query`` and ``stored`` keypoints that ``transform`` (query -> stored, 2x3) puts within
    ``GUIDED_PX`` of each other with descriptors within ``GUIDED_HAMMING`` bits (one per keypoint on each side, the
    closest); how many of them lie within ``TIGHT_PX`` of one homography, in how many of the query's
    ``GUIDED_GRID``² cells those fall, how far the homography is from a similarity at the query's centre (the
    ratio of its stretch along two directions; 1.0: none), and how many of those pairs are near twins
    (``STRONG_HAMMING``). The homography then guides a second round (a similarity from a handful of pairs is a
    little off far from them), and the better round is kept."""
    scale = float(np.hypot(transform[0, 0], transform[1, 0]))
    best = NO_FIT
    m = np.vstack([transform, [0.0, 0.0, 1.0]])
    for _ in range(GUIDED_ROUNDS):
        si, qi, ham = _guided_pairs(query, stored, m)
        if len(si) < 8:
            return best if best.tight else NO_FIT._replace(proposed=len(si))
        src, dst = query.xy[qi].astype(np.float32), stored.xy[si].astype(np.float32)
        hom, mask = _homography(src, dst, TIGHT_PX * max(1.0, scale))
        if hom is None:
            return best
        inside = src[mask]
        g = GUIDED_GRID
        w, h = query.size
        cx = np.minimum(g - 1, (inside[:, 0] * g / max(1, w)).astype(int))
        cy = np.minimum(g - 1, (inside[:, 1] * g / max(1, h)).astype(int))
        cells = len(np.unique(cy * g + cx))
        strong = int((ham[mask] <= STRONG_HAMMING).sum())
        found = Fit(len(si), len(inside), cells, _stretch(hom, w / 2, h / 2), strong)
        if found.tight <= best.tight:
            break
        best, m = found, hom
    return best


def _stretch_alike(stretch: float, best: float) -> bool:
    """Whether a fit's ``stretch`` is within ``CONFIRM_STRETCH`` of the best fit's (a best fit that is degenerate,
    its stretch infinite, holds no one to its shape)."""
    if not math.isfinite(best):
        return True
    return math.isfinite(stretch) and abs(math.log(stretch / best)) <= math.log(CONFIRM_STRETCH)


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


def _guided_pairs(query: Features, stored: Features, m: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
    si, qi = near_pairs(s[foot], qs, GUIDED_PX)
    ham = hamming(stored.fit_desc[foot[si]], query.fit_desc[qi])
    ok = ham <= GUIDED_HAMMING
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
) -> FeatureIndex:
    """A ``FeatureIndex`` of the features in ``batches`` (numbered in order); ``train``: a sample of descriptors for
    the inverted file's centroids (needed above ``FLAT_UNTIL`` descriptors). ``keep_desc``: the descriptors also
    kept beside it, in memory (a small library; a large one maps them from disk, ``block_index``)."""
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
    return FeatureIndex(index, xy, shape=shape, desc=desc, fine=fine)


def chunks(items: list[Features], size: int) -> Iterator[list[Features]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
