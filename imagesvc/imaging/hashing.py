"""Perceptual hashes (imagehash pHash and dHash, hex strings) and their Hamming distance, for near-duplicates."""

from __future__ import annotations

import imagehash
from PIL import Image

from imagesvc.errors import InvalidRequest

__all__ = ["hamming", "perceptual_hashes"]


def perceptual_hashes(img: Image.Image) -> tuple[str, str]:
    """Return ``(phash_hex, dhash_hex)`` of ``img``: 64-bit hashes as 16 hex digits each.

    Both hash a downscaled grayscale copy, so any image size works; pass a small tier (the thumb) for speed.
    """
    gray = img.convert("L")
    return str(imagehash.phash(gray)), str(imagehash.dhash(gray))


def hamming(a_hex: str, b_hex: str) -> int:
    """Number of differing bits between two hex hashes of equal length; ``InvalidRequest`` if they cannot compare."""
    if len(a_hex) != len(b_hex):
        raise InvalidRequest(f"hashes of different lengths cannot be compared: {len(a_hex)} vs {len(b_hex)} hex digits")
    try:
        return (int(a_hex, 16) ^ int(b_hex, 16)).bit_count()
    except ValueError as exc:
        raise InvalidRequest(f"not a hex hash: {a_hex!r} or {b_hex!r}") from exc
