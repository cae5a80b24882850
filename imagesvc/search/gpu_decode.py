"""JPEG decoding, resizing and centre-cropping on the GPU, for ``imagesvc index`` on a CUDA machine.

torchvision's ``decode_jpeg`` decodes a whole list of JPEGs in one nvJPEG call; images of one shape are then resized
together (bicubic, antialiased, shortest side to the model size) and centre-cropped, so the per-image Python work is
a few tensor views. What the GPU decoder refuses falls back to the CPU path of ``imagesvc.search.prepare``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
    by_shape: dict[tuple[int, int], list[int]] = {}
    for i, img in decoded.items():
        by_shape.setdefault((int(img.shape[1]), int(img.shape[2])), []).append(i)
    out: dict[int, Any] = {}
    for (height, width), members in by_shape.items():
        stack = torch.stack([decoded[i] for i in members])
        for i, pixels in zip(members, _resize_crop(stack, height, width, size), strict=True):
            out[i] = pixels
    for i, data in enumerate(datas):  # PNG, CMYK JPEG, corrupt data: the CPU path decides
        if data is None or i in out:
            continue
        try:
            out[i] = torch.from_numpy(prepare_one(data, size)).permute(2, 0, 1).to(device)
        except (OSError, ValueError, SyntaxError):
            continue
    kept = sorted(out)
    if not kept:
        return torch.empty((0, size, size, 3), dtype=torch.uint8, device=device), []
    return torch.stack([out[i] for i in kept]).permute(0, 2, 3, 1), kept


def _decode_single(tensor: Any, device: str) -> Any:
    from torchvision.io import ImageReadMode, decode_jpeg

    try:
        return decode_jpeg(tensor, mode=ImageReadMode.RGB, device=device)
    except RuntimeError:
        return None


def _resize_crop(stack: Any, height: int, width: int, size: int) -> Any:
    """Shortest side to ``size`` (bicubic, antialiased) and a centre crop, for a batch of one shape (N × 3 × H × W)."""
    import torch.nn.functional as F

    scale = size / min(height, width)
    new_h, new_w = max(size, round(height * scale)), max(size, round(width * scale))
    if (new_h, new_w) != (height, width):
        resized = F.interpolate(stack.float(), size=(new_h, new_w), mode="bicubic", antialias=True, align_corners=False)
        stack = resized.clamp_(0, 255).round_().to(stack.dtype)
    top, left = (new_h - size) // 2, (new_w - size) // 2
    return stack[:, :, top : top + size, left : left + size]
