"""Visible provenance marks naming the site, citation URL and institution, never over the page's content: a
translucent box in the largest free margin (``imaging/placement.py`` finds it), or an opaque strip added below the
page where no margin holds it; and optionally a faint diagonal mark across the whole page (an operator's choice
that, unlike the box, does cross the content)."""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from imagesvc.imaging import MarkSpec, TierSpec
from imagesvc.imaging.placement import EDGES, PLACEMENT, MarkPlacement, find_content
from imagesvc.imaging.tiers import decode, encode_jpeg, rejecting

__all__ = [
    "MIN_FONT",
    "Placement",
    "apply_faint_mark",
    "apply_mark",
    "draw_mark",
    "mark_lines",
    "mark_tier",
    "marked_size",
    "plan_for",
    "plan_mark",
    "rebake",
    "sanitize",
]

_FONT_PATHS = (
    Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"),
    Path(__file__).with_name("fonts") / "DejaVuSans.ttf",
)
MIN_FONT = 10
_MAX_FONT = 120
_BAND_RGBA = (0, 0, 0, 100)  # a mark in a margin: translucent over paper
_STRIP_RGBA = (40, 40, 40, 255)  # a strip outside the page: opaque, plainly not part of the page
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


def _mark_parts(mark: MarkSpec) -> tuple[str, str, str, str]:
    """The mark's site, citation URL, credit line ("digitized by ...") and head line (site · URL), sanitized."""
    site, url, institution = sanitize(mark.site), sanitize(mark.citation_url), sanitize(mark.institution)
    credit = f"digitized by {institution}" if institution else ""
    return site, url, credit, " · ".join(part for part in (site, url) if part)


def _distinct_layouts(variants: list[list[str]]) -> list[list[str]]:
    """``variants`` without empty lines, empty layouts and repeats, in their order."""
    unique: list[list[str]] = []
    for lines in variants:
        lines = [line for line in lines if line]
        if lines and lines not in unique:
            unique.append(lines)
    return unique


def mark_lines(mark: MarkSpec) -> list[list[str]]:
    """The layouts tried in order of preference: everything on one line, two lines, site and URL, site alone."""
    site, _, credit, head = _mark_parts(mark)
    full = " · ".join(part for part in (head, credit) if part)
    return _distinct_layouts([[full], [head, credit], [head], [site or head or credit]])


def _width(text: str, font: Font, stroke: int) -> float:
    return font.getlength(text) + 2 * stroke


def _stroke(size: int) -> int:
    return max(1, size // 14)


def _box(lines: list[str], size: int) -> tuple[int, int]:
    """The (length, depth) in px of a mark box holding ``lines`` at font ``size``, a font size of padding around."""
    length = math.ceil(max(_width(line, _font(size), _stroke(size)) for line in lines)) + 2 * size + 2
    return length, len(lines) * round(size * 1.3) + size


def _truncate(text: str, font: Font, stroke: int, room: float) -> str:
    if _width(text, font, stroke) <= room:
        return text
    while text and _width(text + "…", font, stroke) > room:
        text = text[:-1]
    return text.rstrip() + "…" if text else ""


def _overlay(
    lines: tuple[str, ...], size: int, length: int, depth: int, rgba: tuple[int, int, int, int]
) -> Image.Image:
    """A ``length`` x ``depth`` box filled with ``rgba`` holding ``lines`` centred at font ``size`` (shortened with an
    ellipsis where they do not fit)."""
    size = max(1, size)
    # Another tier's box, scaled from the planned one, may round a little short for its font: shrink the type by a
    # few px before shortening the text.
    least = max(1, size - max(2, size // 8))
    while size > least and max(_width(line, _font(size), _stroke(size)) for line in lines) > length - 2 * size:
        size -= 1
    font, stroke = _font(size), _stroke(size)
    shown = [_truncate(line, font, stroke, length - 2 * size) for line in lines]
    line_height = round(size * 1.3)
    overlay = Image.new("RGBA", (max(1, length), max(1, depth)), rgba)
    draw = ImageDraw.Draw(overlay)
    y = depth / 2 - line_height * (len(shown) - 1) / 2
    for line in shown:
        draw.text(
            (length / 2, y),
            line,
            font=font,
            fill=_TEXT_RGBA,
            anchor="mm",
            stroke_width=stroke,
            stroke_fill=_STROKE_RGBA,
        )
        y += line_height
    return overlay


@dataclass(frozen=True)
class Placement:
    """Where one page's mark goes, in shares of the page's width and height, so that every tier of the page (and a
    later rebake from any one clean tier) draws it in the same place at the same relative size.

    ``edge`` is the margin the box sits in (``bottom``, ``top``, ``right``, ``left``), or ``strip`` (a band added
    below the page: the page's pixels are all kept, the image grows by ``strip`` x width) or ``strip-right`` (the
    same beside a page too narrow for the text below it).
    """

    edge: str
    lines: tuple[str, ...]
    font: float  # font size / page width
    box: tuple[float, float, float, float]  # left, top, right, bottom / (width, height, width, height); margins only
    strip: float = 0.0  # the band's depth / page width; strips only


def _candidates(mark: MarkSpec) -> list[list[str]]:
    """Layouts that say everything (site, citation URL, institution), in order of preference."""
    site, url, credit, head = _mark_parts(mark)
    return _distinct_layouts([[" · ".join(p for p in (head, credit) if p)], [head, credit], [site, url, credit]])


def plan_mark(img: Image.Image, mark: MarkSpec, params: MarkPlacement = PLACEMENT) -> Placement | None:
    """Where ``mark`` goes on ``img`` (a tier of the page, best its clean display tier): the largest font, from the
    nominal size down to ``params.min_font_share`` of it, at which a layout saying everything fits a margin free of
    content (the foot, the head, the right, the left margin, in that order, with the fewest lines; nearest each
    edge's middle), its box never over ``params.max_area`` of the page; else a strip outside the page
    (``_strip_plan``). None when nothing drawable is left of the mark. Deterministic.
    """
    variants = _candidates(mark)
    if not variants:
        return None
    width, height = img.size
    nominal = max(MIN_FONT, min(_MAX_FONT, round(width * params.font_per_width)))
    floor = max(MIN_FONT, round(nominal * params.min_font_share))
    content = find_content(img, params)
    size = nominal
    while size >= floor:
        for edge, lines in ((edge, lines) for edge in EDGES for lines in variants):
            length, depth = _box(lines, size)
            if length * depth > params.max_area * width * height:
                continue
            found = content.fit(edge, length, depth)
            if found is not None:
                left, top, right, bottom = found
                box = (left / width, top / height, right / width, bottom / height)
                return Placement(edge, tuple(lines), size / width, box)
        size -= max(1, size // 12)
    return _strip_plan(variants, width, height, nominal)


def _strip_plan(variants: list[list[str]], width: int, height: int, nominal: int) -> Placement:
    """The band outside the page: below it, in the layout with fewest lines that fits the width at the nominal font
    (or smaller, down to ``MIN_FONT``); beside it (``strip-right``, reading upwards) where no layout fits the width
    of a page taller than wide; the text shortened with an ellipsis only past that."""
    for edge, span in (("strip", width), ("strip-right", height)):
        size = nominal
        while size >= MIN_FONT:
            for lines in variants:
                length, depth = _box(lines, size)
                if length <= span:
                    return Placement(edge, tuple(lines), size / width, (0.0, 0.0, 0.0, 0.0), depth / width)
            size -= max(1, size // 12)
        if height <= width:
            break
    lines = variants[-1]
    return Placement("strip", tuple(lines), MIN_FONT / width, (0.0, 0.0, 0.0, 0.0), _box(lines, MIN_FONT)[1] / width)


def marked_size(size: tuple[int, int], placement: Placement | None) -> tuple[int, int]:
    """The pixel size of a tier of ``size`` once marked as ``placement`` says."""
    width, height = size
    if placement is None or not placement.edge.startswith("strip"):
        return width, height
    depth = max(1, round(placement.strip * width))
    if placement.edge == "strip-right":
        return _block_end(width) + depth, height
    return width, _block_end(height) + depth


def _block_end(side: int) -> int:
    """``side`` rounded up to a whole JPEG block (16 px with 4:2:0): the strip starts there, so no block of the
    encoded page mixes page pixels with the band's."""
    return -(-side // 16) * 16


def _add_strip(page: Image.Image, placement: Placement, size: int) -> Image.Image:
    """``page`` with its mark in a strip outside it: the page's last row (or column) repeated to the next block
    boundary, then an opaque band."""
    width, height = page.size
    grown = Image.new("RGB", marked_size(page.size, placement))
    grown.paste(page, (0, 0))
    if placement.edge == "strip-right":
        if pad := _block_end(width) - width:
            grown.paste(page.crop((width - 1, 0, width, height)).resize((pad, height)), (width, 0))
        depth = grown.width - _block_end(width)
        band = _overlay(placement.lines, size, height, depth, _STRIP_RGBA).transpose(Image.Transpose.ROTATE_90)
        grown.paste(band.convert("RGB"), (_block_end(width), 0))
        return grown
    if pad := _block_end(height) - height:
        grown.paste(page.crop((0, height - 1, width, height)).resize((width, pad)), (0, height))
    depth = grown.height - _block_end(height)
    grown.paste(_overlay(placement.lines, size, width, depth, _STRIP_RGBA).convert("RGB"), (0, _block_end(height)))
    return grown


def draw_mark(img: Image.Image, placement: Placement | None, *, in_place: bool = False) -> Image.Image:
    """Return RGB ``img`` (any tier of the page ``placement`` was planned on) with the mark drawn: in its margin box
    (a translucent band, light text), or in a strip added outside the page. A copy unless ``in_place`` (margins
    only: a strip makes a new image)."""
    out = img if in_place and img.mode == "RGB" else img.convert("RGB") if img.mode != "RGB" else img.copy()
    if placement is None:
        return out
    width, height = out.size
    size = max(1, round(placement.font * width))
    if placement.edge.startswith("strip"):
        return _add_strip(out, placement, size)
    left, top, right, bottom = placement.box
    box = (round(left * width), round(top * height), round(right * width), round(bottom * height))
    across, deep = box[2] - box[0], box[3] - box[1]
    if placement.edge in ("bottom", "top"):
        overlay = _overlay(placement.lines, size, across, deep, _BAND_RGBA)
    else:
        upright = _overlay(placement.lines, size, deep, across, _BAND_RGBA)
        turn = Image.Transpose.ROTATE_90 if placement.edge == "right" else Image.Transpose.ROTATE_270
        overlay = upright.transpose(turn)
    patch = Image.alpha_composite(out.crop(box).convert("RGBA"), overlay).convert("RGB")
    out.paste(patch, box[:2])
    return out


def apply_mark(img: Image.Image, mark: MarkSpec, *, in_place: bool = False) -> Image.Image:
    """Return RGB ``img`` with ``mark`` planned on and drawn into it (``plan_mark``, ``draw_mark``); the faint
    diagonal mark first where ``mark.faint`` asks for it. A copy unless ``in_place``."""
    out = img if in_place and img.mode == "RGB" else img.convert("RGB") if img.mode != "RGB" else img.copy()
    return mark_tier(out, mark, plan_mark(out, mark), in_place=True)


def rebake(
    clean: dict[str, bytes], mark: MarkSpec, spec: TierSpec, *, native_longest_side: int | None = None
) -> dict[str, bytes]:
    """Re-mark the clean tiers of one page or illustration (``{tier: JPEG bytes}``, its display tier among them):
    plan the mark on the display tier, draw it on each, encode with the pinned JPEG settings.

    Gives the same bytes as the public tiers ``render_page`` made from these clean tiers. Whether a mark is drawn
    follows ``spec.mark_min_side`` applied to ``native_longest_side`` (the page's or crop's native longest side) or,
    when omitted, to the largest tier's size; unmarked tiers come back unchanged.
    Raises ``ImageRejected`` when the bytes cannot be decoded.
    """
    decoded = {tier: decode(data, spec)[1] for tier, data in clean.items()}
    longest = native_longest_side if native_longest_side is not None else max(max(i.size) for i in decoded.values())
    if longest < spec.mark_min_side:
        return dict(clean)
    with rejecting("cannot mark the image"):
        placement = plan_for(decoded["display"], mark)
        return {tier: encode_jpeg(mark_tier(img, mark, placement), spec.quality) for tier, img in decoded.items()}


def plan_for(display: Image.Image, mark: MarkSpec) -> Placement | None:
    """The one placement of a page's mark, planned on its clean display tier's decoded pixels."""
    return plan_mark(display, mark)


def mark_tier(img: Image.Image, mark: MarkSpec, placement: Placement | None, *, in_place: bool = False) -> Image.Image:
    """One tier of a page marked as ``placement`` says (with the faint mark first where ``mark.faint`` asks)."""
    if mark.faint:
        img = apply_faint_mark(img.convert("RGB"), mark)
        in_place = True
    return draw_mark(img, placement, in_place=in_place)


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
