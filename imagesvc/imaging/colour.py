"""Colour: any decoded mode to 8-bit sRGB ``RGB``, honouring an embedded ICC profile by what it does, not its name.

The colour part of the image (palette expanded, alpha split off, 16-bit and float grey scaled to 8 bits) goes through
the profile to sRGB; then alpha, if any, is flattened onto white. Whether a profile already is sRGB is decided by
running a probe of ramps and primaries through it (a linear-gamma profile named "sRGB" is not sRGB).
"""

from __future__ import annotations

import io
from functools import cache, lru_cache

import numpy as np
from PIL import Image, ImageCms

__all__ = ["to_rgb"]

_ALPHA_MODES = {"RGBA", "LA", "PA", "RGBa", "La"}


@cache
def _srgb() -> ImageCms.ImageCmsProfile:
    return ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB"))


@cache
def _probe(mode: str) -> Image.Image:
    ramp = np.arange(256, dtype=np.uint8)
    if mode == "L":
        return Image.fromarray(ramp[None, :], "L")
    rows = [np.stack([ramp * (c == i) for c in range(3)], axis=1) for i in range(3)]
    rows.append(np.stack([ramp] * 3, axis=1))
    rows.append(np.stack([ramp, ramp[::-1], (ramp // 2 + 64).astype(np.uint8)], axis=1))
    return Image.fromarray(np.stack(rows).astype(np.uint8), "RGB")


@lru_cache(maxsize=32)
def _transform(icc: bytes, mode: str) -> ImageCms.ImageCmsTransform | None:
    """A transform from ``icc`` to sRGB for ``mode`` pixels; None when the profile is unusable or already sRGB."""
    try:
        profile = ImageCms.ImageCmsProfile(io.BytesIO(icc))
        transform = ImageCms.buildTransform(profile, _srgb(), mode, "RGB", ImageCms.Intent.PERCEPTUAL)
    except (OSError, ImageCms.PyCMSError, ValueError, TypeError):
        return None  # broken, or its colour space does not match the pixels: plain conversion instead
    if mode in ("L", "RGB"):
        probe = _probe(mode)
        out = np.asarray(ImageCms.applyTransform(probe, transform), dtype=np.int16)
        expected = np.asarray(probe.convert("RGB"), dtype=np.int16)
        if np.abs(out - expected).max() <= 2:
            return None  # behaves as sRGB: converting would only cost time
    return transform


def _gray16_to_l(img: Image.Image) -> Image.Image:
    arr = np.asarray(img)
    if img.mode == "F":
        arr = np.nan_to_num(arr.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)
        peak = float(arr.max(initial=0.0))
        # Floats in 0-1 are normalised intensities; larger ones are treated as 8- or 16-bit sample values.
        scale = 255.0 if peak <= 1.0 else 1.0 if peak <= 255.0 else 255.0 / 65535.0
        out = np.clip(np.rint(arr * scale), 0, 255)
    else:
        wide = arr.astype(np.int64)
        peak = int(wide.max(initial=0))
        if img.mode == "I" and peak <= 255:
            out = np.clip(wide, 0, 255)
        else:  # 16-bit samples: scale 0-65535 to 0-255 with rounding
            out = (np.clip(wide, 0, 65535) * 255 + 32767) // 65535
    return Image.fromarray(out.astype(np.uint8), "L")


def _split(img: Image.Image) -> tuple[Image.Image, Image.Image | None]:
    """The colour part of ``img`` in L, RGB or CMYK (or LAB), and its alpha band when it has one."""
    mode = img.mode
    if mode == "P":
        has_alpha = "transparency" in img.info or (img.palette is not None and img.palette.mode == "RGBA")
        img = img.convert("RGBA" if has_alpha else "RGB")
        mode = img.mode
    if mode in ("RGBa", "La"):
        img = img.convert(mode[0] + "A" if mode == "La" else "RGBA")
        mode = img.mode
    if mode in ("RGBA", "LA", "PA"):
        alpha = img.getchannel("A")
        colour = img.convert("RGB") if mode == "PA" else img.convert(mode[:-1])
        return colour, alpha
    if mode.startswith("I") or mode == "F":
        return _gray16_to_l(img), None
    if mode in ("L", "RGB", "CMYK", "LAB"):
        return img, None
    return img.convert("RGB"), None


def _flatten(rgb: Image.Image, alpha: Image.Image) -> Image.Image:
    out = Image.new("RGB", rgb.size, (255, 255, 255))
    out.paste(rgb, (0, 0), alpha)
    return out


def to_rgb(img: Image.Image) -> Image.Image:
    """Convert a decoded image of any supported mode to 8-bit sRGB ``RGB``; alpha is flattened onto white.

    An embedded ICC profile is applied on every mode (palette, grey, alpha, CMYK, RGB) unless it behaves as sRGB.
    """
    icc = img.info.get("icc_profile")
    colour, alpha = _split(img)
    transform = _transform(bytes(icc), colour.mode) if icc and colour.mode in ("L", "RGB", "CMYK") else None
    if transform is not None:
        rgb = ImageCms.applyTransform(colour, transform)
    elif colour.mode == "LAB":
        lab = ImageCms.ImageCmsProfile(ImageCms.createProfile("LAB"))
        rgb = ImageCms.profileToProfile(colour, lab, _srgb(), outputMode="RGB")
    elif colour.mode == "RGB":
        rgb = colour
    else:
        rgb = colour.convert("RGB")
    return rgb if alpha is None else _flatten(rgb, alpha)
