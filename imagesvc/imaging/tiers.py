"""Safe decoding of page masters to oriented 8-bit sRGB, tier sizing, resampling and pinned JPEG encoding."""

from __future__ import annotations

import hashlib
import io
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import PIL
from PIL import Image

from imagesvc.errors import ImagesvcError
from imagesvc.imaging import Rendition, TierSpec
from imagesvc.imaging.colour import to_rgb
from imagesvc.imaging.integrity import check_covered, first_scan, jpeg_scans
from imagesvc.imaging.refusals import refused

__all__ = [
    "JPEG_MAX_SIDE",
    "OPTIMIZE_MAX_PIXELS",
    "decode",
    "encode_jpeg",
    "fit_size",
    "jpeg_frame",
    "make_rendition",
    "open_checked",
    "oriented_size",
    "rejecting",
    "resize_to",
    "to_rgb",
    "upright",
]

# Optimised Huffman tables make libjpeg keep every coefficient of the image (3 bytes a pixel at 4:2:0) and Pillow
# allocate a 1-byte-a-pixel output buffer, for files a few percent smaller. Past this size (full tiers of large
# plates) the standard tables are used and a full tier costs about 4 bytes a pixel less (docs/benchmarks.md).
OPTIMIZE_MAX_PIXELS = 40_000_000
# libjpeg cannot encode a side longer than this, so every tier (full included) must fit it.
JPEG_MAX_SIDE = 65_500
# Orientations 5-8 swap width and height.
_SWAPPING_ORIENTATIONS = {5, 6, 7, 8}
# Pillow 13 applies a TIFF's orientation tag while loading it (and reports the oriented size from the header on).
_ORIENTED_ON_LOAD = {"TIFF"} if int(PIL.__version__.split(".")[0]) >= 13 else set()
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
    """Translate any foreign exception raised inside into ``ImageRejected`` saying ``what`` failed, with a reason.

    Pillow's plugins raise OSError, SyntaxError, ValueError, struct.error, EOFError and more for bad data; none of
    them may escape ``imaging``, and their wording is not passed on (the exception stays chained for the log).
    Our own errors pass through untouched.
    """
    try:
        yield
    except ImagesvcError:
        raise
    except Image.DecompressionBombError as exc:
        raise refused("too_large", f"{what}: the image declares more pixels than this service accepts") from exc
    except Image.UnidentifiedImageError as exc:
        raise refused(
            "unsupported_format", f"{what}: not a recognised image format (JPEG, PNG, TIFF, WebP, GIF, BMP)"
        ) from exc
    except MemoryError as exc:
        raise refused("too_large", f"{what}: not enough memory to decode the image") from exc
    except OSError as exc:
        if "truncated" in str(exc):
            raise refused("truncated", f"{what}: the data ends before the image is complete") from exc
        raise refused("corrupt", f"{what}: the image data is damaged") from exc
    except Exception as exc:
        raise refused("corrupt", f"{what}: the image data is damaged") from exc


def open_checked(data: bytes, spec: TierSpec) -> Image.Image:
    """Open ``data`` lazily (header only) and refuse it before any pixel is decoded if it is too large or its data
    cannot cover its declared size (``integrity.check_covered``).

    Raises ``ImageRejected`` for unreadable headers, more than ``spec.max_pixels`` pixels, or a side JPEG cannot hold.
    """
    limit = f"the limit is {spec.max_pixels:,} pixels (IMAGESVC_MAX_IMAGE_PIXELS)"
    with rejecting("cannot read the image header"), warnings.catch_warnings():
        # Pillow's own bomb guard is process-wide; ours (spec.max_pixels) is checked just below instead.
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            img = Image.open(io.BytesIO(data))
        except Image.DecompressionBombError as exc:  # Pillow refuses sizes far past its own limit before we can
            raise refused("too_large", f"refused as a decompression bomb: {limit}", max_pixels=spec.max_pixels) from exc
    width, height = img.size
    if width <= 0 or height <= 0:
        raise refused("corrupt", f"the header declares an empty pixel size {width}x{height}")
    if width * height > spec.max_pixels:
        raise refused(
            "too_large",
            f"refused as a decompression bomb: {width}x{height} = {width * height:,} pixels; {limit}",
            width=width,
            height=height,
            max_pixels=spec.max_pixels,
        )
    if max(width, height) > JPEG_MAX_SIDE:
        raise refused("too_large", f"image side {max(width, height)} px exceeds the JPEG limit of {JPEG_MAX_SIDE} px")
    check_covered(data, img)
    return img


def _orientation(img: Image.Image) -> int:
    """The EXIF orientation still to apply to ``img``'s pixels (1 when none, or when Pillow applies it on load)."""
    if img.format in _ORIENTED_ON_LOAD:
        return 1
    try:
        value = img.getexif().get(0x0112, 1)
    except Exception:  # an unreadable EXIF block means "no orientation", not a bad image
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def jpeg_frame(data: bytes) -> bytes:
    """The first JPEG of ``data``: everything up to the EOI after the first scan (an MPO's first frame)."""
    sos = first_scan(data)
    end = data.find(b"\xff\xd9", sos) if sos >= 0 else -1
    return data[: end + 2] if end >= 0 else data


def _load_jpeg_exactly(img: Image.Image, longest: int | None) -> None:
    """Decode a one-scan JPEG opened by ``_unterminated``, proving that its last row came from the data.

    libjpeg pads a scan that ends early with grey and only warns (Pillow drops the warning). Without its EOI marker,
    the decoder instead runs out of input: a complete scan has delivered its last row by then, a short one has not.
    The buffer is pre-filled with a sentinel colour to tell the two apart.
    """
    if longest is not None and max(img.size) > longest:
        img.draft("RGB", fit_size(*img.size, longest))
    sentinel = {"L": (7,), "RGB": (7, 251, 3), "CMYK": (7, 251, 3, 9)}.get(img.mode)
    if sentinel is None:
        img.load()
        return
    img.im = Image.core.fill(img.mode, img.size, sentinel if len(sentinel) > 1 else sentinel[0])
    try:
        img.load()
    except OSError as exc:
        if "truncated" not in str(exc):
            raise
    img.tile = []
    last = img.crop((0, img.height - 1, img.width, img.height))
    extrema = last.getextrema() if len(sentinel) > 1 else (last.getextrema(),)
    if extrema == tuple((v, v) for v in sentinel):
        raise refused("truncated", "the JPEG data ends before the image its header declares is complete")


def _unterminated(frame: bytes) -> bytes:
    # The EOI goes, and a few zero bytes stand in for the look-ahead libjpeg needs to emit the last rows of a
    # complete scan (measured: 16 are enough); as entropy data they decode to a few blocks at most.
    return frame[:-2] + bytes(16)


_REDUCIBLE = {"L", "LA", "RGB", "RGBA", "CMYK", "I", "F"}  # modes Image.reduce takes


def decode(
    data: bytes, spec: TierSpec, *, longest: int | None = None, reduce: bool = False
) -> tuple[Image.Image, Image.Image]:
    """Decode ``data`` to an oriented 8-bit RGB image; return ``(header_image, rgb)``.

    With ``longest``, a JPEG may be decoded at a reduced DCT scale (1/2, 1/4, 1/8) that still leaves its longest
    side at least ``longest`` px; the caller resizes to the exact size. With ``reduce`` too, any other picture is
    reduced by a whole factor (still at least ``longest``) in its own mode before the RGB conversion, so no full-size
    RGB copy is made. Raises ``ImageRejected`` for bad data.
    """
    img = open_checked(data, spec)
    with rejecting("cannot decode the image"), warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        if img.format in ("JPEG", "MPO"):
            frame = jpeg_frame(data)
            if jpeg_scans(frame) == 1 and frame.endswith(b"\xff\xd9"):
                img = Image.open(io.BytesIO(_unterminated(frame)))
                _load_jpeg_exactly(img, longest)
            elif longest is not None and max(img.size) > longest:
                img.draft("RGB", fit_size(*img.size, longest))
        img.load()
        method = _TRANSPOSE.get(_orientation(img))
        pixels = img
        if reduce and longest is not None and img.format not in ("JPEG", "MPO") and img.mode in _REDUCIBLE:
            factor = max(img.size) // longest
            if factor > 1:
                pixels = img.reduce(factor)
                pixels.info.update(img.info)
        rgb = to_rgb(pixels)
        del pixels
        if method is not None:  # the same mapping as ImageOps.exif_transpose, applied to the converted pixels
            rgb = rgb.transpose(method)
    return img, rgb


def upright(img: Image.Image) -> bool:
    """Whether ``img``'s pixels are stored as they are shown: no EXIF orientation left to apply."""
    return _orientation(img) == 1


def oriented_size(img: Image.Image) -> tuple[int, int]:
    """The header size of ``img`` after EXIF orientation."""
    width, height = img.size
    return (height, width) if _orientation(img) in _SWAPPING_ORIENTATIONS else (width, height)


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
    """Encode RGB ``img`` with pinned settings (baseline, 4:2:0, no metadata; optimised Huffman tables up to
    ``OPTIMIZE_MAX_PIXELS``)."""
    out = io.BytesIO()
    optimize = img.width * img.height <= OPTIMIZE_MAX_PIXELS
    img.save(out, "JPEG", quality=quality, optimize=optimize, progressive=False, subsampling=2)
    return out.getvalue()


def make_rendition(tier: str, data: bytes, size: tuple[int, int]) -> Rendition:
    """Wrap encoded JPEG ``data`` of pixel ``size`` as a ``Rendition`` with its sha256."""
    return Rendition(tier=tier, data=data, width=size[0], height=size[1], sha256=hashlib.sha256(data).hexdigest())
