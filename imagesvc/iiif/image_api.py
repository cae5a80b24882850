"""IIIF Image API 3.0 request parsing into a pixel plan, and rendering of a plan from a decoded source image.

Parsing is pure and needs only the full image size and the service limits; rendering is synchronous CPU work that
callers run in an executor. Syntax errors, out-of-bounds regions, zero sizes and upscaling without ``^`` (or past the
limits) raise ``InvalidRequest`` (HTTP 400), as the Image API asks.
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass

from PIL import Image

from imagesvc.errors import InvalidRequest
from imagesvc.imaging import TierSpec
from imagesvc.imaging.tiers import decode, rejecting

__all__ = ["FORMATS", "QUALITIES", "Limits", "Plan", "parse_request", "render"]

FORMATS = {"jpg": "image/jpeg", "png": "image/png", "webp": "image/webp"}
QUALITIES = ("default", "color", "gray", "bitonal")

_INT = r"(?:0|[1-9][0-9]*)"
_NUM = r"(?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)"
_PIXELS = re.compile(rf"({_INT}),({_INT}),({_INT}),({_INT})")
_PERCENT = re.compile(rf"pct:({_NUM}),({_NUM}),({_NUM}),({_NUM})")
_SIZE_WH = re.compile(rf"(!)?({_INT})?,({_INT})?")
_SIZE_PCT = re.compile(rf"pct:({_NUM})")
_ROTATION = re.compile(rf"(!)?({_NUM})")
# Clockwise rotation in the Image API is counter-clockwise transposition in Pillow.
_TURNS = {90: Image.Transpose.ROTATE_270, 180: Image.Transpose.ROTATE_180, 270: Image.Transpose.ROTATE_90}


@dataclass(frozen=True)
class Limits:
    """The service's ``maxWidth``, ``maxHeight`` and ``maxArea``: no output may exceed them."""

    max_width: int
    max_height: int
    max_area: int


@dataclass(frozen=True)
class Plan:
    """What to produce: a region of the full image in its pixels, the output size before rotation, and the rest."""

    region: tuple[int, int, int, int]
    size: tuple[int, int]
    mirror: bool
    rotation: int
    quality: str
    format: str

    @property
    def canonical(self) -> str:
        """The canonical request path (region/size/rotation/quality.format) in full-image pixels."""
        x, y, w, h = self.region
        rotation = f"{'!' if self.mirror else ''}{self.rotation}"
        quality = "default" if self.quality == "color" else self.quality
        return f"{x},{y},{w},{h}/{self.size[0]},{self.size[1]}/{rotation}/{quality}.{self.format}"

    @property
    def output_size(self) -> tuple[int, int]:
        """Pixel size of the delivered image, after rotation."""
        w, h = self.size
        return (h, w) if self.rotation in (90, 270) else (w, h)


def _bad(part: str, value: str, hint: str) -> InvalidRequest:
    return InvalidRequest(
        f"IIIF {part} {value!r} is not valid: {hint}.",
        recovery=["See https://iiif.io/api/image/3.0/#4-image-requests for the syntax."],
        details={"parameter": part},
    )


def _region(value: str, width: int, height: int) -> tuple[int, int, int, int]:
    if value == "full":
        return 0, 0, width, height
    if value == "square":
        side = min(width, height)
        return (width - side) // 2, (height - side) // 2, side, side
    if m := _PIXELS.fullmatch(value):
        x, y, w, h = (int(g) for g in m.groups())
    elif m := _PERCENT.fullmatch(value):
        px, py, pw, ph = (float(g) for g in m.groups())
        x, y = round(px * width / 100), round(py * height / 100)
        w, h = round(pw * width / 100), round(ph * height / 100)
    else:
        raise _bad("region", value, "expected full, square, x,y,w,h or pct:x,y,w,h")
    if w <= 0 or h <= 0:
        raise _bad("region", value, "width and height must be above zero")
    if x >= width or y >= height:
        raise _bad("region", value, f"it lies outside the {width}x{height} image")
    return x, y, min(w, width - x), min(h, height - y)


def _fit(w: float, h: float, box_w: float, box_h: float) -> tuple[int, int]:
    """Largest size of aspect ``w:h`` inside ``box_w x box_h`` (at least 1 px a side)."""
    scale = min(box_w / w, box_h / h)
    return max(1, int(w * scale + 1e-9)), max(1, int(h * scale + 1e-9))


def _limit(w: int, h: int, limits: Limits) -> tuple[int, int]:
    """Shrink ``w x h`` (keeping its aspect) until it fits every limit."""
    if w <= limits.max_width and h <= limits.max_height and w * h <= limits.max_area:
        return w, h
    w2, h2 = _fit(w, h, limits.max_width, limits.max_height)
    if w2 * h2 > limits.max_area:
        scale = math.sqrt(limits.max_area / (w2 * h2))
        w2, h2 = max(1, int(w2 * scale)), max(1, int(h2 * scale))
    return w2, h2


def _size(value: str, rw: int, rh: int, limits: Limits) -> tuple[int, int]:
    upscale = value.startswith("^")
    body = value[1:] if upscale else value
    if body == "max":
        if upscale:  # as large as the limits allow, keeping the aspect ratio
            return _limit(*_fit(rw, rh, limits.max_width, limits.max_height), limits)
        return _limit(rw, rh, limits)
    if m := _SIZE_PCT.fullmatch(body):
        pct = float(m.group(1))
        w, h = round(rw * pct / 100), round(rh * pct / 100)
    elif (m := _SIZE_WH.fullmatch(body)) and (m.group(2) or m.group(3)):
        bang, sw, sh = m.group(1), m.group(2), m.group(3)
        if bang:
            if not (sw and sh):
                raise _bad("size", value, "!w,h needs both a width and a height")
            if int(sw) == 0 or int(sh) == 0:  # a zero-sized box: _fit would round it up to 1 px
                raise _bad("size", value, "the resulting image would be empty")
            w, h = _fit(rw, rh, int(sw), int(sh))
        elif sw and sh:
            w, h = int(sw), int(sh)
        elif sw:
            w, h = int(sw), max(1, round(rh * int(sw) / rw))
        else:
            w, h = max(1, round(rw * int(sh) / rh)), int(sh)  # type: ignore[arg-type]
    else:
        raise _bad("size", value, "expected max, w,  ,h  w,h  !w,h or pct:n, optionally after ^")
    if w <= 0 or h <= 0:
        raise _bad("size", value, "the resulting image would be empty")
    if not upscale and (w > rw or h > rh):
        raise _bad("size", value, f"it is larger than the {rw}x{rh} region; prefix ^ to ask for upscaling")
    if w > limits.max_width or h > limits.max_height or w * h > limits.max_area:
        raise _bad(
            "size",
            value,
            f"it exceeds this service's limits (maxWidth {limits.max_width}, maxHeight {limits.max_height}, "
            f"maxArea {limits.max_area})",
        )
    return w, h


def _rotation(value: str) -> tuple[bool, int]:
    m = _ROTATION.fullmatch(value)
    if not m or float(m.group(2)) > 360:
        raise _bad("rotation", value, "expected a number of degrees from 0 to 360, optionally after !")
    degrees = float(m.group(2)) % 360
    if degrees not in (0, 90, 180, 270):
        raise _bad("rotation", value, "this service rotates by multiples of 90 degrees only")
    return bool(m.group(1)), int(degrees)


def parse_request(
    region: str, size: str, rotation: str, quality_format: str, width: int, height: int, limits: Limits
) -> Plan:
    """Parse the four path segments of an image request for a ``width x height`` image. Raises ``InvalidRequest``."""
    quality, dot, fmt = quality_format.rpartition(".")
    if not dot or quality not in QUALITIES:
        raise _bad("quality", quality_format, f"expected one of {', '.join(QUALITIES)} followed by .format")
    if fmt not in FORMATS:
        raise _bad("format", fmt, f"expected one of {', '.join(FORMATS)}")
    box = _region(region, width, height)
    out = _size(size, box[2], box[3], limits)
    mirror, turn = _rotation(rotation)
    return Plan(region=box, size=out, mirror=mirror, rotation=turn, quality=quality, format=fmt)


def _encode(img: Image.Image, fmt: str, jpeg_quality: int) -> bytes:
    out = io.BytesIO()
    if fmt == "jpg":
        img.save(out, "JPEG", quality=jpeg_quality, subsampling=2 if img.mode == "RGB" else 0)
    elif fmt == "png":
        img.save(out, "PNG", compress_level=3)  # level 3: most of the size gain at a fraction of the time of 9
    else:
        img.save(out, "WEBP", quality=jpeg_quality, method=3)
    return out.getvalue()


def render(
    data: bytes, plan: Plan, source_size: tuple[int, int], full_size: tuple[int, int], spec: TierSpec, jpeg_quality: int
) -> bytes:
    """Produce ``plan`` from encoded ``data``: an image of ``source_size`` standing for the ``full_size`` image.

    The source may be a smaller tier of the same picture; a JPEG is decoded at the smallest DCT scale that keeps
    enough pixels for the requested size. Raises ``ImageRejected`` for undecodable data.
    """
    sx, sy = source_size[0] / full_size[0], source_size[1] / full_size[1]
    x, y, w, h = plan.region
    need = max(plan.size[0] / (w * sx), plan.size[1] / (h * sy))
    longest = math.ceil(max(source_size) * min(1.0, need)) + 1
    _, img = decode(data, spec, longest=longest)
    dx, dy = img.width / full_size[0], img.height / full_size[1]
    box = (x * dx, y * dy, (x + w) * dx, (y + h) * dy)
    with rejecting("cannot render the IIIF image"):
        out = img.resize(plan.size, Image.Resampling.LANCZOS, box=box, reducing_gap=2.0)
        if plan.mirror:
            out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        if plan.rotation:
            out = out.transpose(_TURNS[plan.rotation])
        if plan.quality in ("gray", "bitonal"):
            out = out.convert("L")
        if plan.quality == "bitonal":
            out = out.point(lambda v: 255 if v >= 128 else 0)
            if plan.format != "jpg":  # JPEG has no 1-bit mode; it keeps the thresholded 8-bit gray
                out = out.convert("1", dither=Image.Dither.NONE)
        return _encode(out, plan.format, jpeg_quality)
