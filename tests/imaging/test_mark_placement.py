"""Mark placement: on pages whose text or plates run to the edges the mark leaves the content as it was (at every
tier, illustrations' crops included), names everything, reads back by OCR after JPEG 70, and its constants are the
ones ``benchmarks/visible_mark.py`` chose."""

from __future__ import annotations

import io
import shutil
import subprocess

import numpy as np
import pytest
from PIL import Image, ImageOps

from fixtures.edge_pages import KINDS, page
from imagesvc.imaging import MarkSpec, TierSpec
from imagesvc.imaging.marks import draw_mark, marked_size, plan_for, plan_mark
from imagesvc.imaging.placement import PLACEMENT, MarkPlacement
from imagesvc.imaging.renditions import render_page
from imagesvc.imaging.tiers import decode, encode_jpeg
from tests.imaging.helpers import MARK
from tests.parts import missing_part

SPEC = TierSpec()


def ink_changed(clean: Image.Image, marked: Image.Image) -> float:
    """The share of ``clean``'s ink (40 levels or more below its paper) that ``marked`` changes by more than 24."""
    a = np.asarray(clean.convert("L"), dtype=np.int16)
    b = np.asarray(marked.convert("L"), dtype=np.int16)[: a.shape[0], : a.shape[1]]
    ink = a <= np.percentile(a, 90) - 40
    return float((ink & (np.abs(a - b) > 24)).sum() / max(1, ink.sum()))


def _pixels(data: bytes) -> Image.Image:
    return decode(data, SPEC)[1]


def test_the_placement_constants_are_the_benchmarked_ones() -> None:
    """Chosen by benchmarks/visible_mark.py (docs/benchmarks.md): moving one needs the benchmark run again."""
    assert (
        MarkPlacement(
            detect_side=500,
            paper_percentile=90.0,
            paper_min=120,
            paper_chroma=90,
            ink_delta=40,
            guard=0.012,
            guard_min_px=16,
            font_per_width=0.014,
            min_font_share=0.8,
            max_area=0.12,
        )
        == PLACEMENT
    )


@pytest.mark.parametrize("kind", KINDS)
def test_no_tier_of_a_page_to_the_edges_has_its_content_covered(kind: str) -> None:
    shown = page(kind, 11)
    master = shown.resize((shown.width * 2, shown.height * 2), Image.Resampling.BICUBIC)
    buffer = io.BytesIO()
    master.save(buffer, "JPEG", quality=92)
    box = (0.1, 0.1, 0.6, 0.5)  # an illustration's crop: on most kinds, content runs to its every edge
    result = render_page(buffer.getvalue(), SPEC, MARK, [box])
    placement = plan_for(_pixels(result.clean["display"].data), MARK)
    assert placement is not None
    for owner, clean, public in [
        ("page", result.clean, result.public),
        ("crop", result.illustrations[0].clean, result.illustrations[0].public),
    ]:
        for tier in ("full", "display", "thumb"):
            before, after = _pixels(clean[tier].data), _pixels(public[tier].data)
            share = ink_changed(before, after)
            assert share <= 0.001, f"{kind} {owner} {tier}: {share:.3%} of the ink changed"
            assert public[tier].data != clean[tier].data, f"{kind} {owner} {tier}: no mark"
            assert (public[tier].width, public[tier].height) == after.size
        if owner == "page":  # one placement for every tier: full and display grow in proportion
            assert after.size == marked_size(before.size, placement)
            full, display = _pixels(public["full"].data), _pixels(public["display"].data)
            assert abs(full.height / full.width - display.height / display.width) < 0.01


def test_a_page_with_margins_keeps_its_size_and_a_full_page_gets_a_strip() -> None:
    assert plan_mark(page("ordinary", 1), MARK).edge in ("bottom", "top", "right", "left")  # type: ignore[union-attr]
    full = page("full", 1)
    placement = plan_mark(full, MARK)
    assert placement is not None and placement.edge == "strip"
    assert marked_size(full.size, placement)[1] > full.height


def test_a_narrow_tall_plate_gets_its_strip_beside_it_saying_everything() -> None:
    plate = page("plate", 2).crop((0, 0, 160, 2000))
    placement = plan_mark(plate, MARK)
    assert placement is not None and placement.edge == "strip-right"
    said = " ".join(placement.lines)
    assert MARK.site in said and MARK.citation_url in said and MARK.institution in said


def _tesseract() -> str:
    found = shutil.which("tesseract")
    if found is None:
        missing_part("tesseract is not installed (Debian: tesseract-ocr; scripts/install-system-deps.sh installs it)")
    return found


@pytest.mark.parametrize("kind", ["full", "ordinary", "marginalia"])
def test_the_mark_reads_back_by_ocr_from_the_display_tier_at_jpeg_70(kind: str) -> None:
    tesseract = _tesseract()
    mark = MarkSpec("Rare Books Digital Library", "https://books.example.org/book/herbal-1543?page=12", "Museo Galileo")
    clean = _pixels(encode_jpeg(page(kind, 3), SPEC.quality))
    placement = plan_mark(clean, mark)
    assert placement is not None
    seventy = _pixels(encode_jpeg(draw_mark(clean, placement), 70))
    width, height = clean.size
    if placement.edge == "strip":
        crop = seventy.crop((0, -(-height // 16) * 16, width, seventy.height))
    else:
        left, top, right, bottom = placement.box
        crop = seventy.crop((round(left * width), round(top * height), round(right * width), round(bottom * height)))
        if placement.edge in ("right", "left"):
            crop = crop.transpose(
                Image.Transpose.ROTATE_270 if placement.edge == "right" else Image.Transpose.ROTATE_90
            )
    prepared = ImageOps.invert(crop.convert("L")).resize((crop.width * 2, crop.height * 2), Image.Resampling.LANCZOS)
    buffer = io.BytesIO()
    prepared.save(buffer, "PNG")
    run = subprocess.run(
        [tesseract, "stdin", "stdout", "--psm", "6"], input=buffer.getvalue(), capture_output=True, check=True
    )
    read = "".join(run.stdout.decode().split())
    for part in ("RareBooksDigitalLibrary", "books.example.org/book/herbal-1543?page=12", "MuseoGalileo"):
        assert part in read, f"{kind}: {part!r} not read in {read!r}"
