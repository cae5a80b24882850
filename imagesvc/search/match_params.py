"""The tuned parameters of search by image, in one frozen object passed to whatever matches (never module state).

Each field is held by the seeded evaluation in ``tests/search/test_image_evaluation.py``: a library of 2,000
generated illustrations whose answers are committed; a field moved far enough to change an answer fails it
(``scripts/mutations.py`` moves them one at a time). The figures that chose them are in docs/benchmarks.md.
A library's own distances depend on the descriptors' patch: ``MatchParams.for_patch``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["DEFAULT", "DISTANCES", "MatchParams"]

# The Hamming distances (max_hamming, sigma, guided_hamming, strong_hamming) for each descriptor patch: chosen for
# 19 px; for 41 px the index's are 1.5 times as far, as a printing's pairs are (the median of a crop's true pairs
# 37 -> 54 bits), and the guided fits' stay 19 px's, as they compare 19 px descriptors (``features.FIT_PATCH``).
DISTANCES = {19: (40, 16.0, 64, 32), 41: (60, 24.0, 64, 32)}


@dataclass(frozen=True)
class MatchParams:
    """How a query is described, how candidates are found and verified, and the rules that call one the same block.

    Grouped as the cascade runs (``printings.find_printings``): the query's features, the vote, RANSAC and the
    tight fit, ``same_block``, then guided matching, siblings, corroboration and expansion."""

    # the query's features (``features.extract_query``)
    patch: int = 41  # px: the descriptors' patch (an index holds one patch's descriptors, ``block_index.params``)
    query_side: int = 800  # px: a query is reduced to this long side
    query_keypoints: int = 1500
    coarser_levels: tuple[int, ...] = (2, 4)  # ORB pyramid steps (1.2x) of a small query's further looks
    min_coarser: int = 200  # keypoints of room under the budget below which a query gets no further look
    same_place_px: float = 3.0  # a further look's keypoint this near a first look's describes it again

    # the vote (``FeatureIndex.candidates``)
    neighbours: int = 0  # stored neighbours per query descriptor; 0: one per ``k_per`` illustrations ...
    k_per: int = 40
    k_min: int = 24  # ... at least ...
    k_max: int = 256  # ... and at most
    max_hamming: int = 60  # bits of 256: a farther neighbour is no match
    sigma: float = 24.0  # bits: a pair's vote falls off as exp(-(distance / sigma)^2)
    turns: int = 16  # bins of the rotation a pair implies ...
    levels: int = 17  # ... and of its change of pyramid level
    window: int = 3  # bins a pair votes in along each
    preselect: int = 4000  # illustrations kept by total votes before each is scored by its best bin
    candidates: int = 400  # verified by RANSAC, the best by their votes ...
    by_pairs: int = 100  # ... and the most by pairs in their best bin ...
    by_place: int = 100  # ... and the most by pairs that agree where the query's centre falls
    place_px: int = 48  # stored px: the cells of that position vote
    nprobe: int = 8  # inverted lists probed

    # RANSAC and the tight fit
    min_pairs: int = 6
    min_scale: float = 0.05  # query-to-stored scale of a plausible transform, and its inverse
    ransac_px: float = 8.0  # reprojection error of the similarity, stored px
    tight_px: float = 2.5  # of the homography that decides same_block

    # ``same_block`` on the index's pairs
    same_block_inliers: int = 12
    same_block_ratio: float = 0.2  # of the best candidate's tight pairs
    same_block_cells: int = 2  # of the query's 4 x 4 cells

    # several same_block candidates held to the best (``_confirmed``, ``_clean_as_the_block``)
    confirm_agree: float = 0.5  # of a candidate's pairs by position, kept in its tight fit (printings: >= 0.56)
    confirm_stretch: float = 1.15  # its stretch within this factor of the best's

    # guided matching by position (``guided_fit``), when no candidate is same_block
    guided_candidates: int = 20
    guided_px: float = 6.0  # stored px a keypoint may lie from where the similarity puts it
    guided_hamming: int = 64  # bits between the descriptors of a pair by position
    guided_rounds: int = 2  # by the similarity, then by the homography fitted to its pairs
    guided_grid: int = 8  # the query's cells (guided_grid x guided_grid) in which tight pairs are counted
    guided_pairs: int = 20  # a guided fit is the same block with this many tight pairs ...
    guided_cells: int = 12  # ... over this many cells ...
    guided_stretch: float = 1.05  # ... nearly a similarity ...
    guided_fewer_cells: int = 10  # ... or over this many cells when ...
    guided_strong: int = 15  # ... this many pairs are within ``strong_hamming`` bits
    strong_hamming: int = 32

    # two near fits that are printings of one block (``_siblings``)
    near_pairs: int = 15
    near_cells: int = 7
    sibling_pairs: int = 60  # two printings matched whole to whole agree in this many tight pairs ...
    sibling_cells: int = 20  # ... over this many cells (two blocks of one subject: <= 22 over 9)

    # a close fit corroborated by a printing of its own block (``_corroborated``)
    close_pairs: int = 12
    close_cells: int = 5
    close_stretch: float = 1.15
    close_strong: float = 0.3  # share of its tight pairs that are near twins
    corroborate_from: int = 1  # close candidates so searched, the closest first

    # expansion: the best found, whole, searched again
    expand_from: int = 1  # (0: none)
    expand_candidates: int = 50
    expand_nprobe: int = 4  # (0: ``nprobe``)
    expand_checked: int = 5  # of its candidates, the best also matched by position (``_printings_like``)
    guided_agree: float = 0.4  # of an expanded printing's pairs by position, kept in its tight fit

    # the answer
    possible_limit: int = 10  # verified candidates that are not same_block, listed as possible printings

    @classmethod
    def for_patch(cls, patch: int, **changes: object) -> MatchParams:
        """The parameters for descriptors of ``patch`` px, with the distances chosen for it (``DISTANCES``)."""
        if patch not in DISTANCES:
            raise ValueError(f"no distances chosen for a {patch} px patch: one of {sorted(DISTANCES)}")
        hamming, sigma, guided, strong = DISTANCES[patch]
        base = cls(patch=patch, max_hamming=hamming, sigma=sigma, guided_hamming=guided, strong_hamming=strong)
        return replace(base, **changes)  # type: ignore[arg-type]

    def neighbours_for(self, count: int) -> int:
        """Stored neighbours each query descriptor keeps in a library of ``count`` illustrations: too few, and in a
        large library a printing's descriptors are crowded out by look-alikes; too many in a small one, and every
        illustration gets pairs enough to drown RANSAC in chance ones."""
        return self.neighbours or int(min(self.k_max, max(self.k_min, count // self.k_per)))


DEFAULT = MatchParams()
