"""Visible provenance marks: a translucent band along the bottom edge naming the site, citation URL and institution,
and optionally a faint diagonal mark across the whole page that cropping the band off does not remove."""

from __future__ import annotations

import math
import unicodedata
from functools import lru_cache
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from imagesvc.imaging import MarkSpec, TierSpec
from imagesvc.imaging.tiers import decode, encode_jpeg, rejecting

__all__ = ["MIN_FONT", "apply_faint_mark", "apply_mark", "mark_lines", "rebake", "sanitize"]

_FONT_PATHS = (
    Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"),
    Path(__file__).with_name("fonts") / "DejaVuSans.ttf",
)
MIN_FONT = 10
_MAX_FONT = 120
_FONT_PER_WIDTH = 0.014  # font px per image px: 28 px on a 2000 px display tier
_MAX_BAND = 0.12  # the mark never covers more than this share of the image (height for a full-width band)
_BAND_RGBA = (0, 0, 0, 100)
_TEXT_RGBA = (255, 255, 255, 235)
_STROKE_RGBA = (0, 0, 0, 150)
# Characters Pillow would draw as boxes or that could hide text: controls, format (incl. tag characters), surrogates,
# private-use and unassigned code points.
_STRIPPED = {"Cc", "Cf", "Cs", "Co", "Cn"}

Font = ImageFont.FreeTypeFont | ImageFont.ImageFont


def sanitize(text: str) -> str:
    """Drop invisible and undrawable characters and collapse whitespace runs to single spaces."""
    kept = "".join(
        " " if ch.isspace() else ch for ch in text if ch.isspace() or unicodedata.category(ch) not in _STRIPPED
    )
    return " ".join(kept.split())


@lru_cache(maxsize=64)
def _font(size: int) -> Font:
    for path in _FONT_PATHS:
        if path.is_file():
            return ImageFont.truetype(str(path), size)
    return ImageFont.load_default(size=size)


def mark_lines(mark: MarkSpec) -> list[list[str]]:
    """The layouts tried in order of preference: everything on one line, two lines, site and URL, site alone."""
    site, url, institution = sanitize(mark.site), sanitize(mark.citation_url), sanitize(mark.institution)
    credit = f"digitized by {institution}" if institution else ""
    head = " · ".join(part for part in (site, url) if part)
    full = " · ".join(part for part in (head, credit) if part)
    variants = [[full], [head, credit], [head], [site or head or credit]]
    unique: list[list[str]] = []
    for lines in variants:
        lines = [line for line in lines if line]
        if lines and lines not in unique:
            unique.append(lines)
    return unique


def _width(text: str, font: Font, stroke: int) -> float:
    return font.getlength(text) + 2 * stroke


def _layout(lines: list[str], nominal: int, width: int, height: int, floor: int) -> int | None:
    """The largest font size in [floor, nominal] at which ``lines`` fit the width and the band limit, else None."""
    size = nominal
    while size >= floor:
        font = _font(size)
        stroke = max(1, size // 14)
        fits_width = max(_width(line, font, stroke) for line in lines) <= width - 2 * size
        band = len(lines) * round(size * 1.3) + size
        if fits_width and band <= height * _MAX_BAND:
            return size
        size -= max(1, size // 12)
    return None


def _truncate(text: str, font: Font, stroke: int, room: float) -> str:
    if _width(text, font, stroke) <= room:
        return text
    while text and _width(text + "…", font, stroke) > room:
        text = text[:-1]
    return text.rstrip() + "…" if text else ""


def _overlay(lines: list[str], size: int, width: int) -> Image.Image:
    """A translucent box ``width`` px wide holding ``lines`` centred at font ``size``."""
    font, stroke = _font(size), max(1, size // 14)
    lines = [_truncate(line, font, stroke, width - 2 * size) for line in lines]
    line_height = round(size * 1.3)
    overlay = Image.new("RGBA", (width, len(lines) * line_height + size), _BAND_RGBA)
    draw = ImageDraw.Draw(overlay)
    y = size / 2 + line_height / 2
    for line in lines:
        draw.text(
            (width / 2, y), line, font=font, fill=_TEXT_RGBA, anchor="mm", stroke_width=stroke, stroke_fill=_STROKE_RGBA
        )
        y += line_height
    return overlay


def _compact(variants: list[list[str]], width: int, height: int, nominal: int) -> Image.Image | None:
    """For plates too short for a full-width band: a box just wide enough for its text in the bottom-right corner,
    turned upright along the right edge on tall narrow plates; None when no legible box fits the area share."""
    room = _MAX_BAND * width * height
    for lines in reversed(variants):  # the shortest text first: it leaves room for the largest type
        size = nominal
        while size >= MIN_FONT:
            stroke = max(1, size // 14)
            box_w = round(max(_width(line, _font(size), stroke) for line in lines)) + 2 * size
            box_h = len(lines) * round(size * 1.3) + size
            if box_w * box_h <= room:
                if box_w <= width and box_h <= height:
                    return _overlay(lines, size, box_w)
                if box_h <= width and box_w <= height:
                    return _overlay(lines, size, box_w).transpose(Image.Transpose.ROTATE_90)
            size -= max(1, size // 12)
    return None


def apply_mark(img: Image.Image, mark: MarkSpec, *, in_place: bool = False) -> Image.Image:
    """Return RGB ``img`` with the mark drawn in a translucent band along its bottom edge (a copy unless
    ``in_place``, which spares a full-size copy of large tiers).

    The font scales with the width (``MIN_FONT`` to 120 px); text that does not fit is wrapped, then shortened to the
    site and URL, then to the site alone, then truncated with an ellipsis. The mark never covers more than
    ``_MAX_BAND`` of the image area, whatever its aspect ratio: fold-outs and scrolls too short for a full-width band
    get a box the size of the text in a corner (upright along the edge of tall ones), and an image too small for a
    legible box (a few px high) gets none. Deterministic for a given font file.
    """
    out = img if in_place and img.mode == "RGB" else img.convert("RGB") if img.mode != "RGB" else img.copy()
    if mark.faint:
        out = apply_faint_mark(out, mark)
    width, height = out.size
    nominal = max(MIN_FONT, min(_MAX_FONT, round(width * _FONT_PER_WIDTH)))
    variants = mark_lines(mark)
    if not variants:  # nothing drawable was left after sanitising
        return out
    overlay = None
    for index, lines in enumerate(variants):
        last = index == len(variants) - 1
        fitted = _layout(lines, nominal, width, height, MIN_FONT if last else max(MIN_FONT, round(nominal * 0.7)))
        if fitted is not None:
            overlay = _overlay(lines, fitted, width)
            break
    if overlay is None:
        overlay = _compact(variants, width, height, nominal)
        if overlay is None:
            return out
    box = (width - overlay.width, height - overlay.height, width, height)
    band = Image.alpha_composite(out.crop(box).convert("RGBA"), overlay).convert("RGB")
    out.paste(band, box[:2])
    return out


def rebake(
    clean_display_or_full: bytes, mark: MarkSpec, spec: TierSpec, *, native_longest_side: int | None = None
) -> bytes:
    """Re-mark a clean tier: decode it, draw ``mark``, encode with the pinned JPEG settings.

    Gives the same bytes as the public tier ``render_page`` made from this clean tier. Whether a mark is drawn
    follows ``spec.mark_min_side`` applied to ``native_longest_side`` (the page's or crop's native longest side,
    needed for thumbs) or, when omitted, to this tier's own size; unmarked tiers come back unchanged.
    Raises ``ImageRejected`` when the bytes cannot be decoded.
    """
    _, img = decode(clean_display_or_full, spec)
    longest = native_longest_side if native_longest_side is not None else max(img.size)
    if longest < spec.mark_min_side:
        return clean_display_or_full
    with rejecting("cannot mark the image"):
        return encode_jpeg(apply_mark(img, mark), spec.quality)


_FAINT_ANGLE = 30  # degrees: rising to the right, across the lines of text rather than along them
_FAINT_FONT_PER_SIDE = 0.028  # font px per px of the longer side
_FAINT_INK = (40, 30, 20, 34)  # dark ink at 13 % opacity, with a light halo at the same opacity: legible when looked
_FAINT_HALO = (255, 255, 255, 34)  # for on light and dark paper alike, unobtrusive when reading


def apply_faint_mark(img: Image.Image, mark: MarkSpec) -> Image.Image:
    """Return a copy of RGB ``img`` with the site and citation URL repeated in staggered diagonal rows across it.

    Low contrast (about 13 % opacity) and spaced out, so the page reads as before; but unlike the bottom band it
    covers the whole page, so no single crop removes it. Deterministic for a given font file.
    """
    text = " · ".join(part for part in (sanitize(mark.site), sanitize(mark.citation_url)) if part)
    if not text:
        return img.copy()
    width, height = img.size
    size = max(MIN_FONT, round(max(width, height) * _FAINT_FONT_PER_SIDE))
    font, stroke = _font(size), max(1, size // 16)
    left, top, right, bottom = font.getbbox(text, stroke_width=stroke)
    strip = Image.new("RGBA", (right - left + 2 * stroke, bottom - top + 2 * stroke), (0, 0, 0, 0))
    ImageDraw.Draw(strip).text(
        (stroke - left, stroke - top), text, font=font, fill=_FAINT_INK, stroke_width=stroke, stroke_fill=_FAINT_HALO
    )
    stamp = strip.rotate(_FAINT_ANGLE, resample=Image.Resampling.BICUBIC, expand=True)
    overlay = Image.new("RGBA", (width, height), (0, 0, 0, 0))
    # Stamp centres on a lattice: along the text direction one text length plus a gap apart, across it 7 font sizes
    # apart, each row shifted by half a step, so every part of the page is near some text.
    theta = math.radians(_FAINT_ANGLE)
    along, across = strip.width + 3 * size, 7 * size
    u = (along * math.cos(theta), -along * math.sin(theta))
    v = (across * math.sin(theta), across * math.cos(theta))
    reach = math.hypot(width, height) / min(along, across) + 2
    cx, cy = width / 2, height / 2
    for j in range(-int(reach), int(reach) + 1):
        for i in range(-int(reach), int(reach) + 1):
            shift = i + (j % 2) / 2
            x = round(cx + shift * u[0] + j * v[0] - stamp.width / 2)
            y = round(cy + shift * u[1] + j * v[1] - stamp.height / 2)
            if x < width and y < height and x + stamp.width > 0 and y + stamp.height > 0:
                overlay.alpha_composite(stamp, dest=(max(x, 0), max(y, 0)), source=(max(-x, 0), max(-y, 0)))
    return Image.alpha_composite(img.convert("RGBA"), overlay).convert("RGB")
