"""JPEG decoding, resizing and centre-cropping on the GPU, for ``imagesvc index`` on a CUDA machine.

torchvision's ``decode_jpeg`` decodes a whole list of JPEGs in one nvJPEG call; images of one shape are then resized
together (bicubic, antialiased, shortest side to the model size) and centre-cropped, so the per-image Python work is
a few tensor views. What the GPU decoder refuses falls back to the CPU path of ``imagesvc.search.prepare``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from imagesvc.search.prepare import prepare_one

__all__ = ["decode_resize"]

_JPEG = b"\xff\xd8"


def decode_resize(datas: Sequence[bytes | None], size: int, device: str) -> tuple[Any, list[int]]:
    """N × size × size × 3 uint8 on ``device`` for the decodable images of ``datas``, and their positions."""
    import torch
    from torchvision.io import ImageReadMode, decode_jpeg

    jpegs = [i for i, d in enumerate(datas) if d is not None and d[:2] == _JPEG]
    decoded: dict[int, Any] = {}
    if jpegs:
        tensors = [torch.frombuffer(bytearray(datas[i]), dtype=torch.uint8) for i in jpegs]  # type: ignore[arg-type]
        try:
            images = decode_jpeg(tensors, mode=ImageReadMode.RGB, device=device)
        except RuntimeError:
            images = [_decode_single(t, device) for t in tensors]
        decoded = {i: img for i, img in zip(jpegs, images, strict=True) if img is not None}
    order = sorted(decoded)
    batch = _resize_crop([decoded[i] for i in order], size) if order else None
    fallback: dict[int, Any] = {}
    for i, data in enumerate(datas):  # PNG, CMYK JPEG, corrupt data: the CPU path decides
        if data is None or i in decoded:
            continue
        try:
            fallback[i] = torch.from_numpy(prepare_one(data, size)).permute(2, 0, 1).to(device)
        except (OSError, ValueError, SyntaxError):
            continue
    if not fallback:  # the usual case: one batched tensor, no per-image reshuffling
        if batch is None:
            return torch.empty((0, size, size, 3), dtype=torch.uint8, device=device), []
        return batch.permute(0, 2, 3, 1), order
    rows = dict(zip(order, batch, strict=True)) if batch is not None else {}
    rows.update(fallback)
    kept = sorted(rows)
    return torch.stack([rows[i] for i in kept]).permute(0, 2, 3, 1), kept


def _decode_single(tensor: Any, device: str) -> Any:
    from torchvision.io import ImageReadMode, decode_jpeg

    try:
        return decode_jpeg(tensor, mode=ImageReadMode.RGB, device=device)
    except RuntimeError:
        return None


def _resize_crop(images: list[Any], size: int) -> Any:
    """Shortest side to ``size`` and a centre crop for images of any shapes (3 × H × W uint8), in one batched op.

    The images are laid on one canvas and ``grid_sample`` (bicubic) reads each one's centre square through its own
    affine map, so the cost per image is one copy, not a chain of kernels. For thumbnails, whose sides are close to
    the model's, this matches an antialiased resize within a few grey levels.
    """
    import torch
    import torch.nn.functional as F

    height = max(int(img.shape[1]) for img in images)
    width = max(int(img.shape[2]) for img in images)
    device = images[0].device
    canvas = torch.zeros((len(images), 3, height, width), dtype=torch.float32, device=device)
    for n, img in enumerate(images):
        canvas[n, :, : img.shape[1], : img.shape[2]] = img
    # The same box as the CPU path: resize so the short side is ``size`` (sides rounded), crop at whole pixels,
    # expressed in each image's own coordinates and then in the canvas's normalised [-1, 1] units.
    h = np.array([img.shape[1] for img in images], dtype=np.float64)
    w = np.array([img.shape[2] for img in images], dtype=np.float64)
    scale = size / np.minimum(h, w)
    new_w, new_h = np.maximum(size, np.round(w * scale)), np.maximum(size, np.round(h * scale))
    box_w, box_h = size * w / new_w, size * h / new_h
    left, top = (new_w - size) // 2 * w / new_w, (new_h - size) // 2 * h / new_h
    theta = np.zeros((len(images), 2, 3), dtype=np.float32)
    theta[:, 0, 0], theta[:, 0, 2] = box_w / width, (2 * left + box_w) / width - 1
    theta[:, 1, 1], theta[:, 1, 2] = box_h / height, (2 * top + box_h) / height - 1
    theta_t = torch.from_numpy(theta).to(device)
    grid = F.affine_grid(theta_t, [len(images), 3, size, size], align_corners=False)
    out = F.grid_sample(canvas, grid, mode="bicubic", padding_mode="border", align_corners=False)
    return out.clamp_(0, 255).round_().to(torch.uint8)
