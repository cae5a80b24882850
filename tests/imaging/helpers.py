"""Helpers shared by the imaging tests: decoding renditions and comparing pixels by PSNR."""

from __future__ import annotations

import hashlib
import io

import numpy as np
from PIL import Image

from imagesvc.imaging import MarkSpec, TierSpec

SPEC = TierSpec()
MARK = MarkSpec(
    site="Rare Books Digital Library",
    citation_url="https://books.example.org/b/ars-moriendi-1475/p/17",
    institution="Bayerische Staatsbibliothek",
)


def pixels(data: bytes) -> Image.Image:
    img = Image.open(io.BytesIO(data))
    img.load()
    return img.convert("RGB")


def psnr(a: Image.Image | np.ndarray, b: Image.Image | np.ndarray) -> float:
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    assert x.shape == y.shape
    mse = float(((x - y) ** 2).mean())
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def scan_digest(jpeg: bytes) -> str:
    """SHA-256 of a JPEG's data from its first start-of-scan marker on (the entropy-coded image): equal digests mean
    the picture was not re-encoded, whatever metadata segments (XMP, C2PA) came before it.

    The segments are walked by their lengths: a byte pair FF DA inside a metadata payload (a signature, a salt) is not
    a start of scan. A digest keeps a failing assertion short where a byte diff of half a megabyte would not be."""
    assert jpeg[:2] == b"\xff\xd8", "not a JPEG"
    at = 2
    while jpeg[at] == 0xFF and jpeg[at + 1] != 0xDA:
        at += 2 + int.from_bytes(jpeg[at + 2 : at + 4], "big")
    assert jpeg[at : at + 2] == b"\xff\xda", f"no start of scan where the segments end (offset {at})"
    return hashlib.sha256(jpeg[at:]).hexdigest()
