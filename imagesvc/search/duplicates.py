"""Near-duplicate groups of illustrations by perceptual hash: within a few bits of Hamming distance, not only equal.

Two printings or scans of one woodcut rarely hash identically. Pairs within ``max_distance`` bits are found without
comparing all pairs: split the 64-bit hash into ``max_distance + 1`` bands; by pigeonhole, two hashes that differ in
at most ``max_distance`` bits agree exactly on at least one band, so only hashes sharing a band value are compared.
Groups are the connected components of those pairs (union-find).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

__all__ = [
    "NEAR_DUPLICATE_BITS",
    "REGROUP_MAX_NEW",
    "fold_groups",
    "groups_of_values",
    "near_duplicate_groups",
    "parse_hashes",
    "regrouped",
]

NEAR_DUPLICATE_BITS = 4  # of 64: well inside what re-encoding or rescanning one picture moves a pHash
# New distinct hashes past which ``regrouped`` gives up and the groups are made again whole: each costs one pass over
# the table's hashes (~0.3 ms at 200,000), a whole grouping ~200 ms, so past ~500 the whole one is cheaper.
REGROUP_MAX_NEW = 500


def _bands(bits: int, count: int) -> list[tuple[int, int]]:
    """``count`` (shift, width) bands covering ``bits`` bits."""
    base, extra = divmod(bits, count)
    out, shift = [], 0
    for i in range(count):
        width = base + (1 if i < extra else 0)
        out.append((shift, width))
        shift += width
    return out


def parse_hashes(hashes: Sequence[str | None]) -> tuple[np.ndarray, np.ndarray, int]:
    """The hashes as uint64 values, which of them are present (well-formed), and their width in bits."""
    values = np.zeros(len(hashes), np.uint64)
    present = np.zeros(len(hashes), bool)
    bits = 0
    for i, h in enumerate(hashes):
        if h:
            try:
                values[i] = int(h, 16)
            except ValueError:
                continue
            present[i] = True
            bits = max(bits, 4 * len(h))
    return values, present, min(bits, 64) or 64


def _close_pairs(distinct: np.ndarray, bits: int, max_distance: int) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs of ``distinct`` (sorted, unique values) within ``max_distance`` bits of each other.

    Per band, the values are sorted by the band's bits; those sharing it form runs, and each value is compared with
    the ones 1, 2, ... places further on only while they are still in its run, so the work is the sum of the runs'
    squares (not the longest run times the whole table: a cluster of similar hashes stays a local cost)."""
    firsts, seconds = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for shift, width in _bands(bits, max_distance + 1):
        keys = (distinct >> np.uint64(shift)) & np.uint64((1 << width) - 1)
        order = np.argsort(keys, kind="stable")
        keys, values = keys[order], distinct[order]
        live = np.flatnonzero(keys[1:] == keys[:-1])  # positions whose next neighbour shares the band
        step = 1
        while len(live):
            close = np.bitwise_count(values[live] ^ values[live + step]) <= max_distance
            firsts.append(order[live[close]])
            seconds.append(order[live[close] + step])
            step += 1
            live = live[live + step < len(keys)]
            live = live[keys[live + step] == keys[live]]
    return np.concatenate(firsts), np.concatenate(seconds)


def _components(count: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The smallest member of each node's connected component, for ``count`` nodes joined by edges ``a``-``b``."""
    label = np.arange(count)
    while True:
        low = np.minimum(label[a], label[b])
        before = label.copy()
        np.minimum.at(label, a, low)
        np.minimum.at(label, b, low)
        label = label[label]  # follow each label to its own label: components collapse in a few rounds
        if np.array_equal(label, before):
            return label


def near_duplicate_groups(hashes: Sequence[str | None], max_distance: int = NEAR_DUPLICATE_BITS) -> np.ndarray:
    """A group number per hash (int32), -1 for a hash with no near duplicate (or none at all).

    ``hashes`` are hex strings of equal length (imagehash's ``str()``); malformed ones count as missing. Groups are
    numbered in the order of their first member.
    """
    return groups_of_values(*parse_hashes(hashes), max_distance)


def groups_of_values(
    values: np.ndarray, present: np.ndarray, bits: int, max_distance: int = NEAR_DUPLICATE_BITS
) -> np.ndarray:
    """``near_duplicate_groups`` of hashes already parsed (``parse_hashes``: values, which are present, width)."""
    group = np.full(len(values), -1, np.int32)
    rows = np.flatnonzero(present)
    if len(rows) == 0:
        return group
    # Identical hashes are one picture: pairs are looked for among the distinct values only.
    distinct, inverse, counts = np.unique(values[rows], return_inverse=True, return_counts=True)
    root = _components(len(distinct), *_close_pairs(distinct, bits, max_distance))
    size = np.bincount(root, weights=counts, minlength=len(distinct))
    row_root = root[inverse]
    grouped = size[row_root] > 1
    roots, first = np.unique(row_root[grouped], return_index=True)
    number = np.empty(len(distinct), np.int32)
    number[roots[np.argsort(first, kind="stable")]] = np.arange(len(roots), dtype=np.int32)
    group[rows[grouped]] = number[row_root[grouped]]
    return group


def regrouped(
    group: np.ndarray,
    values: np.ndarray,
    present: np.ndarray,
    bits: int,
    fresh: np.ndarray,
    lost: np.ndarray,
    max_distance: int = NEAR_DUPLICATE_BITS,
) -> np.ndarray | None:
    """The near-duplicate groups of a table whose rows changed, made again only where the change can reach; None
    when more than ``REGROUP_MAX_NEW`` distinct hashes arrived (make them whole: ``groups_of_values``).

    ``group``: each row's group before the change (-1 for the ``fresh`` rows and rows alone), ``values`` and
    ``present`` the rows' hashes now, ``lost`` the groups that lost a member. A component the change cannot reach
    stays as it was: a hash near a fresh one, or a member of a group that lost one, is pulled in with its whole group,
    so the rows made again are closed under closeness. Their groups take the numbers they free first, then new ones.
    The groups are those ``groups_of_values`` makes, numbered differently."""
    new = np.unique(values[fresh[present[fresh]]])
    if len(new) > REGROUP_MAX_NEW:
        return None
    near = np.zeros(len(values), bool)
    near[fresh] = True
    for value in new:
        near |= present & (np.bitwise_count(values ^ value) <= max_distance)
    reached = np.unique(group[near])
    freed = np.union1d(reached[reached >= 0], lost)
    near |= np.isin(group, freed)
    rows = np.flatnonzero(near)
    local = groups_of_values(values[rows], present[rows], bits, max_distance)
    count = int(local.max()) + 1 if len(local) else 0
    top = int(group.max()) + 1 if len(group) else 0
    numbers = np.concatenate([freed, np.arange(top, top + max(count - len(freed), 0))]).astype(np.int32)
    out = group.copy()
    out[rows] = np.where(local >= 0, numbers[np.maximum(local, 0)] if count else -1, -1)
    if len(out) and int(out.max()) >= len(out):  # numbers left unused by many changes: number the groups again
        grouped = out >= 0
        out[grouped] = np.unique(out[grouped], return_inverse=True)[1]
    return out


def fold_groups(group: np.ndarray, cand: np.ndarray, score: np.ndarray | None) -> tuple[np.ndarray, dict]:
    """Keep the best-scored (then first) candidate of each near-duplicate group (``group[row]``, -1: alone) among
    ``cand``; returns the keep mask over ``cand`` and each group's member rows."""
    keep = np.ones(len(cand), bool)
    groups = group[cand]
    dup = np.flatnonzero(groups >= 0)
    if len(dup) == 0:
        return keep, {}
    primary = np.zeros(len(dup)) if score is None else -score[dup]
    order = dup[np.lexsort((cand[dup], primary, groups[dup]))]
    g = groups[order]
    first = np.r_[True, g[1:] != g[:-1]]
    keep[order[~first]] = False
    members: dict[int, list[int]] = defaultdict(list)
    for pos in order:
        members[int(groups[pos])].append(int(cand[pos]))
    return keep, members
