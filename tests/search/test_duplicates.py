"""Near-duplicate grouping by pHash: a few bits apart is the same picture; further apart is not."""

from __future__ import annotations

import io
import random

import imagehash
import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFilter

from imagesvc.search.duplicates import (
    NEAR_DUPLICATE_BITS,
    REGROUP_MAX_NEW,
    groups_of_values,
    near_duplicate_groups,
    regrouped,
)


def _flip(hex_hash: str, *bits: int) -> str:
    value = int(hex_hash, 16)
    for bit in bits:
        value ^= 1 << bit
    return f"{value:016x}"


def test_hashes_a_few_bits_apart_share_a_group() -> None:
    base = "c3a5f00f12345678"
    hashes = [base, _flip(base, 1, 20, 63), _flip(base, 2, 9, 30, 40, 50, 60), None, "ffffffffffffffff", base]
    group = near_duplicate_groups(hashes)
    assert group[0] == group[1] == group[5] != -1  # 3 bits apart, and identical
    assert group[2] == -1  # 6 bits from the base: another picture
    assert group[3] == -1 and group[4] == -1


def test_groups_are_transitive() -> None:
    a = "0000000000000000"
    b = _flip(a, 0, 1, 2, 3)  # 4 from a
    c = _flip(b, 10, 11, 12, 13)  # 4 from b, 8 from a
    group = near_duplicate_groups([a, b, c])
    assert group[0] == group[1] == group[2] != -1


def test_a_rescaled_recompressed_picture_is_a_near_duplicate_of_itself() -> None:
    img = Image.new("RGB", (400, 300), (230, 220, 190))
    draw = ImageDraw.Draw(img)
    for i in range(12):
        draw.ellipse((20 + 25 * i, 40 + 10 * i, 120 + 25 * i, 140 + 10 * i), outline=(40, 30, 20), width=4)
    other = Image.new("RGB", (400, 300), (230, 220, 190))
    ImageDraw.Draw(other).rectangle((50, 50, 350, 250), fill=(40, 30, 20))
    copy = io.BytesIO()
    img.resize((310, 232)).filter(ImageFilter.GaussianBlur(1)).save(copy, "JPEG", quality=60)
    hashes = [str(imagehash.phash(x)) for x in (img, Image.open(copy), other)]
    group = near_duplicate_groups(hashes)
    assert group[0] == group[1] != -1
    assert group[2] == -1


def _brute_force_groups(hashes: list[str | None], max_distance: int) -> list[int]:
    """Every pair compared, components by plain union-find, groups numbered by first member: obviously right."""
    values = [int(h, 16) if h else None for h in hashes]
    parent = list(range(len(hashes)))

    def find(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    for i, a in enumerate(values):
        for j in range(i + 1, len(values)):
            b = values[j]
            if a is not None and b is not None and (a ^ b).bit_count() <= max_distance:
                parent[find(j)] = find(i)
    roots = [find(i) for i in range(len(hashes))]
    sizes = {r: roots.count(r) for r in set(roots)}
    numbering: dict[int, int] = {}
    return [
        numbering.setdefault(r, len(numbering)) if values[i] is not None and sizes[r] > 1 else -1
        for i, r in enumerate(roots)
    ]


def test_groups_match_every_pair_compared_on_clustered_hashes() -> None:
    """Clusters of near and identical hashes, chains, hashes that share whole bands but are far apart, and blanks."""
    rng = random.Random(20261122)
    hashes: list[str | None] = []
    for _ in range(40):  # clusters: a centre and members a few bits away, some identical
        centre = rng.getrandbits(64)
        for _ in range(rng.randint(1, 12)):
            value = centre
            for bit in rng.sample(range(64), rng.randint(0, 6)):
                value ^= 1 << bit
            hashes.append(f"{value:016x}")
    for _ in range(300):  # many hashes equal in their top 48 bits, so one band is a long run of far-apart values
        hashes.append(f"{(0xABCD_EF01_2345 << 16) | rng.getrandbits(16):016x}")
    hashes += [None, "not-hex", "0" * 16, "0" * 16] + [f"{rng.getrandbits(64):016x}" for _ in range(200)]
    rng.shuffle(hashes)
    for distance in (0, 2, 4, 7):
        expected = _brute_force_groups([h if h and h != "not-hex" else None for h in hashes], distance)
        assert near_duplicate_groups(hashes, distance).tolist() == expected, distance


def _partition(group: np.ndarray) -> list[int]:
    first: dict[int, int] = {}
    return [-1 if g < 0 else first.setdefault(int(g), len(first)) for g in group.tolist()]


def _chains(rng: np.random.Generator, count: int) -> np.ndarray:
    """Hashes in chains: each a few bits from the one before, so that removing one can split a group in two."""
    out = np.zeros(count, np.uint64)
    current = int(rng.integers(0, 2**63))
    for i in range(count):
        if rng.random() < 0.3:
            current = int(rng.integers(0, 2**63))  # a new chain
        else:
            for bit in rng.choice(64, size=int(rng.integers(1, NEAR_DUPLICATE_BITS + 1)), replace=False):
                current ^= 1 << int(bit)
        out[i] = current
    return out


@pytest.mark.parametrize("seed", range(40))
def test_regrouping_after_a_change_groups_as_a_whole_grouping_does(seed: int) -> None:
    """Rows removed (bridges of chains among them), rows added (joining groups), rows without a hash: the groups
    made again where the change reaches are those a whole grouping makes."""
    rng = np.random.default_rng(seed)
    values = _chains(rng, 300)
    present = rng.random(300) > 0.1
    before = groups_of_values(values, present, 64)
    kept = np.sort(rng.choice(300, size=int(rng.integers(200, 300)), replace=False))
    gone = np.setdiff1d(np.arange(300), kept)
    fresh_values = np.concatenate([values[rng.choice(300, 5)] ^ np.uint64(1 << int(rng.integers(64))), _chains(rng, 6)])
    at = np.sort(rng.integers(0, len(kept) + 1, len(fresh_values)))
    new_values = np.insert(values[kept], at, fresh_values)
    new_present = np.insert(present[kept], at, rng.random(len(fresh_values)) > 0.1)
    carried = np.insert(before[kept], at, -1).astype(np.int32)
    fresh_at = at + np.arange(len(fresh_values))
    lost = np.unique(before[gone])
    again = regrouped(carried, new_values, new_present, 64, fresh_at, lost[lost >= 0])
    assert again is not None
    assert _partition(again) == _partition(groups_of_values(new_values, new_present, 64))
    assert int(again.max()) < len(again)  # group numbers stay within the table's size


def test_regrouping_gives_up_past_its_bound() -> None:
    values = np.arange(REGROUP_MAX_NEW + 1, dtype=np.uint64) << np.uint64(20)
    present = np.ones(len(values), bool)
    fresh = np.arange(len(values))
    assert regrouped(np.full(len(values), -1, np.int32), values, present, 64, fresh, np.zeros(0, np.int64)) is None
