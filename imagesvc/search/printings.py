"""Which of a query's candidates are printings of its block: the rule cascade of search by image.

``find_printings`` runs, for one query (``MatchParams`` passed in, nothing read from module state):

1. ``same_block`` of the query's candidates (pairs from the index's neighbours, ``FeatureIndex.candidates``),
   several of them held to the best by their pairs found by position (``_confirmed``) and by how cleanly they fit
   beside the best's block (``_clean_as_the_block``);
2. when none is, the best candidates matched again by position (``_guided``: a small crop); a candidate that comes
   ``near`` counts when another does too and the two are printings of one block (``_siblings``), or when one that
   comes ``close`` is corroborated by a printing of its block that its own search finds (``_corroborated``);
3. *expansion*: the best found, whole, searched as a query of its own; the printings it finds are listed too when
   their pairs with the query, guided through it, pass the rule of ``same_block`` and ``guided_agree``.

Verified candidates that no step calls the same block (a tight fit of ``same_block_inliers`` pairs or a guided fit
that came ``near`` or ``close``) are answered apart, as possible printings (a recut copy, a worn impression): never
mixed with the same block, never dropped. Without the stored descriptors beside the index (an index made before
they were kept), step 1 only. Each step earns its place on the seeded evaluation (docs/search.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from imagesvc.search.feature_index import Candidate, FeatureIndex, same_block
from imagesvc.search.features import Features
from imagesvc.search.guided_fit import NO_FIT, Fit, compose, guided_fit, stretch_alike
from imagesvc.search.match_params import MatchParams

__all__ = ["Answer", "PrintingSearch", "find_printings"]


@dataclass(frozen=True)
class Answer:
    """``same_block``: printings of the query's block, most pairs first; ``possible``: verified candidates that are
    not (another hand's copy, a partial fit), best first."""

    same_block: list[Candidate]
    possible: list[Candidate] = field(default_factory=list)


def find_printings(index: FeatureIndex, query: Features, allowed: np.ndarray | None, params: MatchParams) -> Answer:
    """The printings of ``query``'s block among the ``allowed`` illustrations of ``index`` (``None``: all)."""
    return PrintingSearch(index, query, allowed, params).run()


class PrintingSearch:
    """One query's run of the cascade; guided fits and the printings of each illustration searched whole are made
    once a query."""

    def __init__(self, index: FeatureIndex, query: Features, allowed: np.ndarray | None, params: MatchParams) -> None:
        self.index, self.query, self.allowed, self.p = index, query, allowed, params
        self.fits: dict[int, Fit] = {}  # guided fits to the query by each candidate's own transform
        self.printings: dict[int, list[Candidate]] = {}  # each searched illustration's printings (``_printings_of``)
        self._tried: list[Candidate] = []  # expansion's printings that the query's pairs did not hold to

    def run(self) -> Answer:
        p, index = self.p, self.index
        considered = index.candidates(self.query, self.allowed)
        found = same_block(considered, p)
        if index.desc is None:
            return Answer(found, self._possible(considered, found, []))
        self.query = self.query.first_look()  # matched by position from here: each place once
        if found:
            found = self._confirmed(found)
        else:
            guided = considered[: p.guided_candidates]
            found = self._guided(guided) or self._corroborated(guided)
        more = self._expanded(found)
        found = sorted(found + more, key=lambda c: -c.inliers)  # stable: the query's own order among equals
        return Answer(found, self._possible(considered, found, self._tried))

    def _possible(self, considered: list[Candidate], found: list[Candidate], tried: list[Candidate]) -> list[Candidate]:
        """Verified candidates not listed as the same block: a similarity fit of ``same_block_inliers`` pairs from
        the index (RANSAC's, before the tight fit), a guided fit that came ``near`` or ``close``, or a printing that
        expansion found whose tight fit to the query has that many pairs but was not held to it; best first,
        ``possible_limit`` of them."""
        p = self.p
        listed = {c.number for c in found}
        out: dict[int, Candidate] = {}
        verified = [(c, c.loose) for c in considered] + [(c, c.inliers) for c in tried]
        for c, pairs in verified:
            fit = self.fits.get(c.number)
            if fit is not None and (fit.near(p) or fit.close(p)) and fit.tight > c.inliers:
                c = _found(fit, c)
            elif pairs < p.same_block_inliers:
                continue
            if c.number not in listed and (c.number not in out or out[c.number].inliers < c.inliers):
                out[c.number] = c
        return sorted(out.values(), key=lambda c: (-c.inliers, -c.votes))[: p.possible_limit]

    def _expanded(self, found: list[Candidate]) -> list[Candidate]:
        """The printings that the best found illustrations, searched whole, find (``expand_from`` of them), held to
        the query as the query's own are, on the same footing (the seed's pairs found by position too): a recut
        found by the seed agrees with the query piecewise only, in few of its pairs and far fewer than the seed."""
        p = self.p
        self._tried = []
        if not found or p.expand_from <= 0:
            return []
        seen = {c.number for c in found}
        more: list[Candidate] = []
        for seed in found[: p.expand_from]:
            if seed.transform is None:
                continue
            for c in self._printings_of(seed.number):
                if c.number in seen or c.transform is None:
                    continue
                seen.add(c.number)
                through = compose(c.transform, seed.transform)  # query -> seed -> this one
                fit = guided_fit(self.query, self.index.features_of(c.number), through, p)
                more.append(Candidate(c.number, fit.tight, fit.proposed, c.votes, c.loose, fit.cells, through))
        if not more:
            return []
        seed = found[0]
        best = max(c.inliers for c in found + more)
        if seed.transform is not None:
            best = max(best, self._query_fit(seed).tight)
        kept = [
            c
            for c in more
            if c.inliers >= p.same_block_inliers
            and c.inliers >= p.same_block_ratio * best
            and c.inliers >= p.guided_agree * c.pairs
        ]
        self._tried = [c for c in more if c not in kept]
        return kept

    def _query_fit(self, c: Candidate) -> Fit:
        """The guided fit of the query to candidate ``c`` by its own transform, made once a query."""
        if c.number not in self.fits:
            assert c.transform is not None
            self.fits[c.number] = guided_fit(self.query, self.index.features_of(c.number), c.transform, self.p)
        return self.fits[c.number]

    def _printings_of(self, number: int) -> list[Candidate]:
        """The other printings of illustration ``number``'s block that its own stored features find among the
        allowed (``_printings_like``), each with its transform from ``number``'s pixels; searched once a query."""
        if number not in self.printings:
            index, p = self.index, self.p
            mask = np.ones(index.count, bool) if self.allowed is None else self.allowed.copy()
            mask[number] = False
            whole = index.features_of(number)
            considered = index.candidates(whole, mask, p.expand_candidates, 0, 0, p.expand_nprobe)
            self.printings[number] = self._printings_like(whole, considered)
        return self.printings[number]

    def _printings_like(self, whole: Features, considered: list[Candidate]) -> list[Candidate]:
        """The candidates of a whole printing's own search (``whole``) that are printings of its block: of the
        ``same_block`` ones and the ``expand_checked`` best, those that agree with it by position as two printings
        of one block do (``Fit.sibling``). In a large library a printing's nearest descriptors are crowded by
        look-alikes, so its sibling can come first with 11 pairs from the index (at 200,000 illustrations) where by
        position the two agree in hundreds; and a picture of the same subject drawn to the same outline can pass
        ``same_block`` on the index's pairs (21 in 3 cells beside a sibling's 82 in 7, on the demo library) where
        by position it agrees along the outline only (34 pairs in 5 cells, the sibling 180 in 28)."""
        p = self.p
        same = {c.number for c in same_block(considered, p)}
        found = []
        for rank, c in enumerate(considered):
            if c.transform is None or (c.number not in same and rank >= p.expand_checked):
                continue
            if guided_fit(whole, self.index.features_of(c.number), c.transform, p).sibling(p):
                found.append(c)
        return found

    def _confirmed(self, found: list[Candidate]) -> list[Candidate]:
        """Of several ``same_block`` candidates, those whose fit by position agrees with the best one's (the one
        with most pairs in it). The index's pairs are a sample, and a picture of the same subject can draw a few
        more of them than its share (19 in 3 cells beside a printing's 71, at 10,000 illustrations); by position a
        printing's pairs then number in the hundreds and the look-alike's in the tens. Two printings of one block
        differ by a similarity, so the query's fits to them stretch alike (within 1.08 of each other at 10,000
        illustrations), where a recut or a picture of the same subject fits with a stretch of its own (1.28 to 1.51
        apart) or keeps fewer of its pairs in the fit (``confirm_agree``: a recut's 0.45). Those held are then held
        to the best's block by how cleanly they fit (``_clean_as_the_block``)."""
        if len(found) < 2:
            return found
        p = self.p
        fitted = [self._query_fit(c) if c.transform is not None else NO_FIT for c in found]
        best = max(fitted, key=lambda f: f.tight)
        if not best.tight:  # no fit to hold them to: as the index's pairs found them
            return found
        held = [
            (c, f)
            for c, f in zip(found, fitted, strict=True)
            if f is best
            or (
                f.tight >= p.same_block_ratio * best.tight
                and f.tight >= p.confirm_agree * f.proposed
                and stretch_alike(f.stretch, best.stretch, p)
            )
        ]
        return self._clean_as_the_block(held, best)

    def _clean_as_the_block(self, held: list[tuple[Candidate, Fit]], best: Fit) -> list[Candidate]:
        """Of candidates held to the best fit, those that fit the query as cleanly as the printings of the best's
        block do (the best and the candidates that agree with it whole to whole, ``_agree_whole``): as large a share
        of their pairs by position in the tight fit, and as large a share of those near twins (``strong_hamming``).

        A recut cut close to its original can fit a crop with as many pairs and cells as a printing, but its strokes
        lie a pixel or two off: either fewer of its pairs are near twins (0.33 to 0.48 of them on the test library;
        the printings' 0.50 or more) or fewer keep to the tight fit (0.50 to 0.61; the printings' 0.79 or more). A
        picture that holds the same motif at another scale fits as cleanly as the block, and stays."""
        first = next(c for c, f in held if f is best)
        clean = {c.number: (f.tight / max(1, f.proposed), f.strong / max(1, f.tight)) for c, f in held}
        floor = clean[first.number]
        unsure, siblings = [], 0
        for c, _f in held:
            agree, share = clean[c.number]
            if agree >= floor[0] and share >= floor[1]:
                continue  # as clean as the best: kept, and it lowers no floor
            if self._agree_whole(first, c).sibling(self.p):
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

    def _guided(self, considered: list[Candidate]) -> list[Candidate]:
        """The best of ``considered`` matched again against its own stored keypoints where its similarity puts the
        query (every stored keypoint in the query's footprint, not only the few that came back among the index's
        neighbours), as a list of one when its fit is the same block; else two that come ``near`` and are
        printings of one block (``_siblings``); else empty.

        A third of each side of a printing holds ~70 of its stored keypoints, about half of which pair with the
        query, but only a quarter of those pairs come back from the index; here they are found by position. A block
        of the same subject agrees along the shared frame and outline only, so its pairs fill few of the query's
        cells, while a printing's fill most of them."""
        p = self.p
        best: tuple[Fit, Candidate] | None = None
        near: list[tuple[Fit, Candidate]] = []
        for c in considered:
            if c.transform is None:
                continue
            fit = self._query_fit(c)
            if fit.same_block(p):
                if best is None or (fit.cells, fit.tight) > (best[0].cells, best[0].tight):
                    best = (fit, c)
            elif fit.near(p):
                near.append((fit, c))
        if best is not None:
            return [_found(*best)]
        return self._siblings(sorted(near, key=lambda n: (n[0].cells, n[0].tight), reverse=True))

    def _siblings(self, near: list[tuple[Fit, Candidate]]) -> list[Candidate]:
        """Of the candidates that came ``near`` (best first), the first two that are printings of one block, found
        by matching them whole to whole through the query, else empty. Two printings of one block agree all over
        (175 or more tight pairs in 37 or more cells at 10,000 illustrations), two different blocks of one subject
        along their shared frame and outline only (at most 22 pairs, 9 cells); a block of the same subject printed
        once has no such sibling, which keeps its near fit out."""
        for i, (fit, a) in enumerate(near):
            for other_fit, b in near[i + 1 :]:
                if self._agree_whole(a, b).sibling(self.p):
                    return [_found(fit, a), _found(other_fit, b)]
        return []

    def _agree_whole(self, a: Candidate, b: Candidate) -> Fit:
        """Candidates ``a`` and ``b`` of one query matched whole to whole through it (``a``'s transform undone,
        ``b``'s applied)."""
        if a.transform is None or b.transform is None:
            return NO_FIT
        undo = np.linalg.inv(np.vstack([a.transform, [0.0, 0.0, 1.0]]))[:2]
        features_of = self.index.features_of
        return guided_fit(features_of(a.number), features_of(b.number), compose(b.transform, undo), self.p)

    def _corroborated(self, considered: list[Candidate]) -> list[Candidate]:
        """The candidate that comes ``close`` first (most cells, then pairs) with a printing of its own block (found
        by its own search, ``_printings_of``) that comes as close to the query through it, stretched alike: the
        two, else empty. Only the closest is searched (``corroborate_from``).

        A crop of a sparse part of a printing holds a few dozen keypoints, and its block's other printings are often
        not among its candidates at all, so ``_siblings`` has nothing to pair. The one printing that is can still
        fit it closely, and that printing, whole, finds its siblings as surely as a full scan would; through it, a
        sibling may fit the query better than the query's own search could show. A picture of the same subject
        printed once fits as closely at times and has no sibling: nothing corroborates it. A block printed twice
        whose lines only run alike fits in pairs that are seldom near twins (0.23 and 0.24 of them on the demo
        library), hence ``close_strong`` 0.3."""
        p = self.p
        close = []
        for c in considered:
            fit = self.fits.get(c.number)
            if c.transform is not None and fit is not None and fit.close(p):
                close.append((fit, c))
        close.sort(key=lambda n: (n[0].cells, n[0].tight), reverse=True)
        for fit, c in close[: p.corroborate_from]:
            assert c.transform is not None
            for s in self._printings_of(c.number):
                if s.transform is None:
                    continue
                through = compose(s.transform, c.transform)  # query -> c -> its sibling
                agree = guided_fit(self.query, self.index.features_of(s.number), through, p)
                if agree.close(p) and stretch_alike(agree.stretch, fit.stretch, p):
                    sibling = Candidate(s.number, agree.tight, agree.proposed, s.votes, s.loose, agree.cells, through)
                    return [_found(fit, c), sibling]  # ``c`` first: expanded from, its printings already searched
        return []


def _found(fit: Fit, c: Candidate) -> Candidate:
    """``c`` as found by its guided fit."""
    return Candidate(c.number, fit.tight, fit.proposed, c.votes, c.loose, fit.cells, c.transform)
