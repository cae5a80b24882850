"""Safe decoding of page masters to oriented 8-bit sRGB, tier sizing, resampling and pinned JPEG encoding."""

from __future__ import annotations

import hashlib
import io
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

import numpy as np
from PIL import Image, ImageCms

from imagesvc.errors import ImageRejected, ImagesvcError
from imagesvc.imaging import Rendition, TierSpec

__all__ = [
    "JPEG_MAX_SIDE",
    "decode",
    "encode_jpeg",
    "fit_size",
    "make_rendition",
    "open_checked",
    "oriented_size",
    "rejecting",
    "resize_to",
    "to_rgb",
]

# libjpeg cannot encode a side longer than this, so every tier (full included) must fit it.
JPEG_MAX_SIDE = 65_500
# Orientations 5-8 swap width and height.
_SWAPPING_ORIENTATIONS = {5, 6, 7, 8}
_ALPHA_MODES = {"RGBA", "LA", "PA", "RGBa", "La"}
_TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}


@contextmanager
def rejecting(what: str) -> Iterator[None]:
    """Translate any foreign exception raised inside into ``ImageRejected`` naming ``what`` failed.

    Pillow's plugins raise OSError, SyntaxError, ValueError, struct.error, EOFError and more for bad data; none of
    them may escape ``imaging``. Our own errors pass through untouched.
    """
    try:
        yield
    except ImagesvcError:
        raise
    except Image.DecompressionBombError as exc:
        raise ImageRejected(f"{what}: refused as a decompression bomb ({exc})") from exc
    except Image.UnidentifiedImageError as exc:
        raise ImageRejected(f"{what}: not a recognised image format (JPEG, PNG, TIFF, WebP, ...)") from exc
    except MemoryError as exc:
        raise ImageRejected(f"{what}: not enough memory to decode the image") from exc
    except Exception as exc:
        raise ImageRejected(
            f"{what}: corrupt, truncated or unsupported image data ({type(exc).__name__}: {exc})"
        ) from exc


def open_checked(data: bytes, spec: TierSpec) -> Image.Image:
    """Open ``data`` lazily (header only) and refuse it before any pixel is decoded if it is too large.

    Raises ``ImageRejected`` for unreadable headers, more than ``spec.max_pixels`` pixels, or a side JPEG cannot hold.
    """
    with rejecting("cannot read the image header"), warnings.catch_warnings():
        # Pillow's own bomb warning uses a process-wide limit; ours (spec.max_pixels) is checked just below instead.
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            img = Image.open(io.BytesIO(data))
        except Image.DecompressionBombError as exc:  # beyond 2x Image.MAX_IMAGE_PIXELS: Pillow refuses first
            raise ImageRejected(
                f"image refused as a decompression bomb: {exc} (this service's limit is {spec.max_pixels:,} pixels)",
                details={"max_pixels": spec.max_pixels},
            ) from exc
    width, height = img.size
    if width <= 0 or height <= 0:
        raise ImageRejected(f"image has an empty pixel size {width}x{height}")
    if width * height > spec.max_pixels:
        raise ImageRejected(
            f"image refused as a decompression bomb: {width}x{height} = {width * height:,} pixels "
            f"exceeds the limit of {spec.max_pixels:,} pixels",
            details={"width": width, "height": height, "max_pixels": spec.max_pixels},
        )
    if max(width, height) > JPEG_MAX_SIDE:
        raise ImageRejected(f"image side {max(width, height)} px exceeds the JPEG limit of {JPEG_MAX_SIDE} px")
    return img


def _orientation(img: Image.Image) -> int:
    try:
        value = img.getexif().get(0x0112, 1)
    except Exception:  # an unreadable EXIF block means "no orientation", not a bad image
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def decode(data: bytes, spec: TierSpec, *, longest: int | None = None) -> tuple[Image.Image, Image.Image]:
    """Decode ``data`` to an oriented 8-bit RGB image; return ``(header_image, rgb)``.

    With ``longest``, a JPEG may be decoded at a reduced DCT scale (1/2, 1/4, 1/8) that still leaves its longest
    side at least ``longest`` px; the caller resizes to the exact size. Raises ``ImageRejected`` for bad data.
    """
    img = open_checked(data, spec)
    with rejecting("cannot decode the image"), warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        if longest is not None and img.format == "JPEG" and max(img.size) > longest:
            raw_w, raw_h = img.size  # draft sizes are in stored (unrotated) coordinates
            img.draft("RGB", fit_size(raw_w, raw_h, longest))
        img.load()
        rgb = to_rgb(img)
        method = _TRANSPOSE.get(_orientation(img))
        if method is not None:  # the same mapping as ImageOps.exif_transpose, applied to the converted pixels
            rgb = rgb.transpose(method)
    return img, rgb


def oriented_size(img: Image.Image) -> tuple[int, int]:
    """The header size of ``img`` after EXIF orientation."""
    width, height = img.size
    return (height, width) if _orientation(img) in _SWAPPING_ORIENTATIONS else (width, height)


@cache
def _srgb() -> ImageCms.ImageCmsProfile:
    return ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB"))


def _apply_icc(img: Image.Image) -> Image.Image | None:
    """Convert an ICC-tagged RGB/CMYK/L image to sRGB; None when there is no usable, non-sRGB profile."""
    icc = img.info.get("icc_profile")
    if not icc or img.mode not in ("RGB", "CMYK", "L"):
        return None
    try:
        profile = ImageCms.ImageCmsProfile(io.BytesIO(icc))
        if "srgb" in (ImageCms.getProfileDescription(profile) or "").lower():
            return None  # already sRGB: converting would only cost time
        return ImageCms.profileToProfile(
            img, profile, _srgb(), renderingIntent=ImageCms.Intent.PERCEPTUAL, outputMode="RGB"
        )
    except (OSError, ImageCms.PyCMSError, ValueError):
        # A broken profile, or one whose colour space does not match the pixels: fall back to plain conversion.
        return None


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


def _flatten(img: Image.Image) -> Image.Image:
    rgba = img.convert("RGBA")
    background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return Image.alpha_composite(background, rgba).convert("RGB")


def to_rgb(img: Image.Image) -> Image.Image:
    """Convert a decoded image of any supported mode to 8-bit sRGB ``RGB``; alpha is flattened onto white.

    ICC profiles are honoured for RGB, CMYK and L images; 16-bit and float grayscale is scaled to 8 bits.
    """
    converted = _apply_icc(img)
    if converted is not None:
        return converted
    mode = img.mode
    if mode == "RGB":
        return img.copy() if img.info.get("icc_profile") else img
    if (mode == "P" and "transparency" in img.info) or mode in _ALPHA_MODES:
        return _flatten(img)
    if mode.startswith("I") or mode == "F":
        return _gray16_to_l(img).convert("RGB")
    if mode == "LAB":
        lab = ImageCms.ImageCmsProfile(ImageCms.createProfile("LAB"))
        return ImageCms.profileToProfile(img, lab, _srgb(), outputMode="RGB")
    return img.convert("RGB")


def fit_size(width: int, height: int, longest: int) -> tuple[int, int]:
    """Size that fits ``longest`` on the longer side, never enlarged.

    The shorter side is ``round(short * longest / long)`` rounded half up in integer arithmetic (at least 1 px), so
    the same master always gives the same size whatever code path derives it.
    """
    long_side = max(width, height)
    if long_side <= longest:
        return width, height
    if width >= height:
        return longest, max(1, (height * longest * 2 + long_side) // (2 * long_side))
    return max(1, (width * longest * 2 + long_side) // (2 * long_side)), longest


def resize_to(img: Image.Image, size: tuple[int, int]) -> Image.Image:
    """Resample ``img`` to ``size`` with LANCZOS, first box-reducing by an integer factor when shrinking a lot.

    The box pre-reduction keeps at least 2x the target size for the LANCZOS pass, which costs little quality (see
    docs/benchmarks.md) and most of the time.
    """
    if img.size == size:
        return img
    return img.resize(size, Image.Resampling.LANCZOS, reducing_gap=2.0)


def encode_jpeg(img: Image.Image, quality: int) -> bytes:
    """Encode RGB ``img`` with pinned settings (baseline, optimised Huffman tables, 4:2:0, no metadata)."""
    out = io.BytesIO()
    img.save(out, "JPEG", quality=quality, optimize=True, progressive=False, subsampling=2)
    return out.getvalue()


def make_rendition(tier: str, data: bytes, size: tuple[int, int]) -> Rendition:
    """Wrap encoded JPEG ``data`` of pixel ``size`` as a ``Rendition`` with its sha256."""
    return Rendition(tier=tier, data=data, width=size[0], height=size[1], sha256=hashlib.sha256(data).hexdigest())
