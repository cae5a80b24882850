"""Perceptual hashes: hex strings, stable under resizing and recompression, far apart for different pictures."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from imagesvc.errors import InvalidRequest
from imagesvc.imaging.hashing import hamming, perceptual_hashes
from tests.imaging.awkward import encode, page_image


def test_hashes_are_16_hex_digits_and_stable_under_resize_and_jpeg() -> None:
    img = page_image(1200, 900, seed=1)
    small = Image.open(io.BytesIO(encode(img.resize((300, 225)), quality=70)))
    (p1, d1), (p2, d2) = perceptual_hashes(img), perceptual_hashes(small)
    assert len(p1) == len(d1) == 16 and int(p1, 16) >= 0
    assert hamming(p1, p2) <= 10 and hamming(d1, d2) <= 10
    other = perceptual_hashes(page_image(1200, 900, seed=1).rotate(90, expand=True))
    assert hamming(p1, other[0]) > 16


def test_hamming_counts_bits_and_refuses_mismatched_hashes() -> None:
    assert hamming("ff00", "0f01") == 5
    with pytest.raises(InvalidRequest):
        hamming("ff", "ff00")
    with pytest.raises(InvalidRequest):
        hamming("zz", "00")
