"""Turn stored image bytes into the model's input pixels: decode at reduced size, resize, centre-crop, as uint8.

This is open_clip's image transform (shortest side to the model size, bicubic, centre crop) done with Pillow on raw
bytes, so that it can run in worker processes over whole slices of images and hand back one contiguous array;
normalisation (mean and std) happens later as a tensor operation, on the GPU when there is one. Nothing here imports
torch, so decoder processes start in well under a second.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
from PIL import Image

__all__ = ["prepare_one", "prepare_slice"]


def prepare_one(data: bytes, size: int) -> np.ndarray:
    """``size`` × ``size`` × 3 uint8 pixels of one encoded image. Raises ``OSError``/``ValueError`` on bad data."""
    img = Image.open(io.BytesIO(data))
    img.draft("RGB", (size, size))  # JPEG: decode at a DCT scale no smaller than needed, far cheaper than a full decode
    img = img.convert("RGB")
    width, height = img.size
    scale = size / min(width, height)
    new_w, new_h = max(size, round(width * scale)), max(size, round(height * scale))
    if (new_w, new_h) != (width, height):
        img = img.resize((new_w, new_h), Image.Resampling.BICUBIC)
    left, top = (new_w - size) // 2, (new_h - size) // 2
    if (new_w, new_h) != (size, size):
        img = img.crop((left, top, left + size, top + size))
    return np.asarray(img, dtype=np.uint8)


def prepare_slice(datas: Sequence[bytes | None], size: int) -> tuple[np.ndarray, list[int]]:
    """Pixels of every decodable image in ``datas`` stacked as N × size × size × 3, and their positions in ``datas``.

    Missing (``None``) or undecodable images are left out, so one bad file costs one image, not the slice.
    """
    out = np.empty((len(datas), size, size, 3), dtype=np.uint8)
    kept: list[int] = []
    for position, data in enumerate(datas):
        if data is None:
            continue
        try:
            out[len(kept)] = prepare_one(data, size)
        except (OSError, ValueError, Image.DecompressionBombError, SyntaxError):
            continue
        kept.append(position)
    return out[: len(kept)], kept
