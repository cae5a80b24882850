"""The ingest entry point: one page master in, every clean and marked tier of the page and its illustrations out."""

from __future__ import annotations

import math
from collections.abc import Sequence

from PIL import Image

from imagesvc.imaging import IllustrationRenditions, MarkSpec, PageRenditions, Rendition, TierSpec
from imagesvc.imaging.hashing import perceptual_hashes
from imagesvc.imaging.marks import mark_tier, plan_for
from imagesvc.imaging.refusals import refused
from imagesvc.imaging.tiers import (
    decode,
    encode_jpeg,
    fit_size,
    jpeg_frame,
    make_rendition,
    open_checked,
    oriented_size,
    rejecting,
    resize_to,
    upright,
)

__all__ = ["pixel_box", "render_page"]

# JPEG masters in these modes are published byte for byte; CMYK/YCCK ones are re-encoded because many clients show
# (Adobe-inverted) CMYK JPEGs wrongly or not at all.
_COPYABLE_JPEG_MODES = ("RGB", "L")
_EPS = 1e-6


def pixel_box(index: int, bbox: Sequence[float], width: int, height: int) -> tuple[int, int, int, int]:
    """Turn a 0-1 ``(x, y, width, height)`` box into a pixel box of a ``width`` x ``height`` page, clamped to it.

    Edges round outwards (floor/ceil) so a box never loses a partly covered pixel. Raises ``ImageRejected`` naming
    ``index`` when the box is malformed or empty after clamping.
    """
    if len(bbox) != 4 or not all(isinstance(v, int | float) and math.isfinite(v) for v in bbox):
        raise refused(
            "bad_region", f"illustration {index}: bbox must be four finite numbers (x, y, width, height), got {bbox!r}"
        )
    x, y, w, h = (float(v) for v in bbox)
    # The epsilon keeps float noise (0.5 + 0.4 = 0.9000000000000001) from adding a pixel row.
    left = min(max(math.floor(x * width + _EPS), 0), width)
    top = min(max(math.floor(y * height + _EPS), 0), height)
    right = min(max(math.ceil((x + w) * width - _EPS), 0), width)
    bottom = min(max(math.ceil((y + h) * height - _EPS), 0), height)
    if right <= left or bottom <= top:
        raise refused("bad_region", f"illustration {index}: bbox {tuple(bbox)!r} is empty once clamped to the page")
    return left, top, right, bottom


def _tiers(
    source: list[Image.Image],
    clean_full: bytes | None,
    spec: TierSpec,
    mark: MarkSpec | None,
    full_pixels_exact: bool,
) -> tuple[dict[str, Rendition], dict[str, Rendition], Image.Image]:
    """Clean and public tiers of one oriented RGB image; returns (clean, public, thumb pixels).

    The image is handed over in ``source`` (emptied here) so that its full-size pixels can be dropped, or marked in
    place, once the clean tiers are out: one full-size copy at a time, not three. Marks are drawn on the pixels a
    later decode of the stored clean tier gives, so ``marks.rebake`` reproduces each public tier byte for byte;
    ``full_pixels_exact`` says the image already is what decoding ``clean_full`` gives (a copied JPEG master).
    """
    full = source.pop()
    width, height = full.size
    if clean_full is None:
        clean_full = encode_jpeg(full, spec.quality)
    display_size = fit_size(width, height, spec.display)
    display = resize_to(full, display_size)
    thumb_size = fit_size(width, height, spec.thumb)
    thumb = resize_to(display, thumb_size)
    clean = {
        "full": make_rendition("full", clean_full, (width, height)),
        "display": make_rendition("display", encode_jpeg(display, spec.quality), display_size),
        "thumb": make_rendition("thumb", encode_jpeg(thumb, spec.quality), thumb_size),
    }
    if mark is None or max(width, height) < spec.mark_min_side:
        return clean, dict(clean), thumb
    public: dict[str, Rendition] = {}
    # One placement for every tier, planned on the clean display tier as a rebake will see it.
    shown = decode(clean["display"].data, spec)[1]
    placement = plan_for(shown, mark)
    for tier in ("display", "thumb"):
        pixels = shown if tier == "display" else decode(clean[tier].data, spec)[1]
        marked = mark_tier(pixels, mark, placement, in_place=True)
        public[tier] = make_rendition(tier, encode_jpeg(marked, spec.quality), marked.size)
    del shown, pixels, marked
    if not full_pixels_exact:
        del full  # before the clean full is decoded: never two full-size images at once
        full = decode(clean_full, spec)[1]
    full = mark_tier(full, mark, placement, in_place=True)
    public["full"] = make_rendition("full", encode_jpeg(full, spec.quality), full.size)
    return clean, {tier: public[tier] for tier in clean}, thumb


def _small_tiers_only(
    master: bytes, rgb: Image.Image, size: tuple[int, int], spec: TierSpec
) -> tuple[dict[str, Rendition], dict[str, Rendition]]:
    """Tiers of an unmarked JPEG page without illustrations: full is the master itself, the rest from a draft decode."""
    width, height = size
    display_size = fit_size(width, height, spec.display)
    display = resize_to(rgb, display_size)
    thumb_size = fit_size(width, height, spec.thumb)
    clean = {
        "full": make_rendition("full", master, size),
        "display": make_rendition("display", encode_jpeg(display, spec.quality), display_size),
        "thumb": make_rendition("thumb", encode_jpeg(resize_to(display, thumb_size), spec.quality), thumb_size),
    }
    return clean, dict(clean)


def render_page(
    master: bytes, spec: TierSpec, mark: MarkSpec | None, bboxes: Sequence[tuple[float, float, float, float]]
) -> PageRenditions:
    """Decode ``master`` once and derive every tier of the page and of each illustration box (0-1, oriented page).

    Clean tiers: ``full`` (a JPEG master byte for byte unless CMYK, else JPEG at native size), ``display`` and
    ``thumb`` (longest side ``spec.display`` / ``spec.thumb``, never enlarged). Public tiers are the clean ones with
    ``mark`` drawn when the native longest side is at least ``spec.mark_min_side``, otherwise the clean ones.
    Deterministic. Raises ``ImageRejected`` for corrupt, truncated, unsupported or oversized masters and bad boxes.
    """
    header = open_checked(master, spec)
    fmt = header.format or "unknown"
    width, height = oriented_size(header)
    boxes = [pixel_box(i, bbox, width, height) for i, bbox in enumerate(bboxes)]
    # An MPO (phones) is a JPEG followed by more frames: its first frame is the page, copied byte for byte. Not a
    # JPEG stored sideways with an EXIF orientation: the clean full tier would arrive sideways wherever the flag is
    # ignored (or stripped), while the catalog gives its upright size; it is re-encoded upright instead.
    copy_full = fmt in ("JPEG", "MPO") and header.mode in _COPYABLE_JPEG_MODES and upright(header)
    full_bytes = master if fmt == "JPEG" else jpeg_frame(master)
    marked = mark is not None and max(width, height) >= spec.mark_min_side
    with rejecting("cannot derive tiers"):
        if copy_full and not marked and not boxes:
            # Nothing needs full-resolution pixels: decode at the smallest DCT scale that still covers display.
            _, rgb = decode(master, spec, longest=spec.display)
            clean, public = _small_tiers_only(full_bytes, rgb, (width, height), spec)
            return PageRenditions(fmt, width, height, clean, public, [])
        rgb = decode(master, spec)[1]  # not the header image too: it may hold the same pixels
        if rgb.size != (width, height):
            raise refused("corrupt", f"decoded size {rgb.size} does not match the header size {(width, height)}")
        illustrations = []  # first, while the page's pixels are whole: the page's public full is marked in place
        for index, box in enumerate(boxes):
            crop_clean, crop_public, thumb = _tiers([rgb.crop(box)], None, spec, mark, full_pixels_exact=False)
            phash, dhash = perceptual_hashes(thumb)
            illustrations.append(IllustrationRenditions(index, crop_clean, crop_public, phash, dhash))
        source = [rgb]
        del rgb  # _tiers holds the only reference and frees it as soon as it can
        clean, public, _ = _tiers(source, full_bytes if copy_full else None, spec, mark, full_pixels_exact=copy_full)
    return PageRenditions(fmt, width, height, clean, public, illustrations)
