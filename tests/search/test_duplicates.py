"""Near-duplicate grouping by pHash: a few bits apart is the same picture; further apart is not."""

from __future__ import annotations

import io
import random

import imagehash
from PIL import Image, ImageDraw, ImageFilter

from imagesvc.search.duplicates import near_duplicate_groups


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
