"""Helpers shared by the imaging tests: decoding renditions and comparing pixels by PSNR."""

from __future__ import annotations

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
