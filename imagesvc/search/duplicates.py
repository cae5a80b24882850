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

__all__ = ["NEAR_DUPLICATE_BITS", "fold_groups", "near_duplicate_groups"]

NEAR_DUPLICATE_BITS = 4  # of 64: well inside what re-encoding or rescanning one picture moves a pHash


def _bands(bits: int, count: int) -> list[tuple[int, int]]:
    """``count`` (shift, width) bands covering ``bits`` bits."""
    base, extra = divmod(bits, count)
    out, shift = [], 0
    for i in range(count):
        width = base + (1 if i < extra else 0)
        out.append((shift, width))
        shift += width
    return out


def near_duplicate_groups(hashes: Sequence[str | None], max_distance: int = NEAR_DUPLICATE_BITS) -> np.ndarray:
    """A group number per hash (int32), -1 for a hash with no near duplicate (or none at all).

    ``hashes`` are hex strings of equal length (imagehash's ``str()``); malformed ones count as missing.
    """
    n = len(hashes)
    values = np.zeros(n, np.uint64)
    present = np.zeros(n, bool)
    bits = 0
    for i, h in enumerate(hashes):
        if h:
            try:
                values[i] = int(h, 16)
            except ValueError:
                continue
            present[i] = True
            bits = max(bits, 4 * len(h))
    parent = np.arange(n)

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = int(parent[i])
        return i

    rows = np.flatnonzero(present)
    for shift, width in _bands(min(bits, 64) or 64, max_distance + 1):
        keys = (values[rows] >> np.uint64(shift)) & np.uint64((1 << width) - 1)
        order = np.argsort(keys, kind="stable")
        sorted_keys, sorted_rows = keys[order], rows[order]
        sorted_values = values[sorted_rows]
        # Hashes sharing this band's value sit next to each other once sorted: compare each with the ones 1, 2, ...
        # places further on while any such neighbours still share the value (the longest run bounds the loop).
        step = 1
        while step < len(sorted_keys):
            same = sorted_keys[step:] == sorted_keys[:-step]
            if not same.any():
                break
            close = same & (np.bitwise_count(sorted_values[step:] ^ sorted_values[:-step]) <= max_distance)
            for a, b in zip(sorted_rows[:-step][close].tolist(), sorted_rows[step:][close].tolist(), strict=True):
                ra, rb = find(a), find(b)
                if ra != rb:
                    parent[rb] = ra
            step += 1
    roots = np.array([find(i) for i in range(n)]) if n else np.zeros(0, np.int64)
    group = np.full(n, -1, np.int32)
    if n:
        sizes = np.bincount(roots, minlength=n)
        numbering: dict[int, int] = {}
        for i in range(n):
            if present[i] and sizes[roots[i]] > 1:
                group[i] = numbering.setdefault(int(roots[i]), len(numbering))
    return group


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
