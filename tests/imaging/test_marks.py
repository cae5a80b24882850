"""Visible marks: a box at the foot of an empty page, scaled to the width, saying everything, free of invisible
characters."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from imagesvc.imaging import MarkSpec, TierSpec
from imagesvc.imaging.marks import apply_mark, mark_lines, plan_mark, rebake, sanitize
from tests.imaging.awkward import encode, page_image
from tests.imaging.helpers import MARK, psnr


def changed_rows(before: Image.Image, after: Image.Image) -> np.ndarray:
    diff = np.abs(np.asarray(before, dtype=np.int16) - np.asarray(after, dtype=np.int16)).max(axis=(1, 2))
    return np.flatnonzero(diff > 0)


@pytest.mark.parametrize("size", [(2000, 1400), (600, 900), (6000, 4000)])
def test_on_an_empty_page_the_mark_sits_at_the_foot_and_the_size_is_kept(size: tuple[int, int]) -> None:
    page = Image.new("RGB", size, (236, 224, 196))
    marked = apply_mark(page, MARK)
    rows = changed_rows(page, marked)
    assert marked.size == page.size and rows.size > 0
    assert rows.min() >= size[1] * (1 - 0.14), "the box reaches too high"
    assert rows.max() == size[1] - 1, "the box is not at the bottom edge"
    assert page.getpixel((0, size[1] - 1)) == (236, 224, 196), "the input was modified"


def test_mark_is_dark_band_with_light_text_so_it_reads_on_light_and_dark_pages() -> None:
    for colour in ((250, 250, 250), (10, 10, 10)):
        page = Image.new("RGB", (2000, 1400), colour)
        band = np.asarray(apply_mark(page, MARK))[-40:, :, :].astype(int).sum(axis=2)
        assert band.max() - band.min() > 400, f"text does not stand out on {colour}"


def test_every_layout_names_the_site_the_citation_url_and_the_institution() -> None:
    placement = plan_mark(Image.new("RGB", (300, 210), (240, 230, 200)), MARK)
    assert placement is not None
    said = " ".join(placement.lines)
    assert MARK.site in said and MARK.citation_url in said and MARK.institution in said
    assert mark_lines(MARK)[-1] == ["Rare Books Digital Library"]


def test_invisible_and_tag_characters_are_stripped() -> None:
    hidden = "Rare\u200b Books\u2060 \U000e0041\U000e0042Library\x07\ufeff"
    assert sanitize(hidden) == "Rare Books Library"
    same = MarkSpec(site=hidden, citation_url=MARK.citation_url, institution=MARK.institution)
    plain = MarkSpec(site="Rare Books Library", citation_url=MARK.citation_url, institution=MARK.institution)
    page = page_image(1200, 800)
    assert np.array_equal(np.asarray(apply_mark(page, same)), np.asarray(apply_mark(page, plain)))


def test_mark_is_deterministic() -> None:
    page = page_image(1500, 1000)
    assert encode(apply_mark(page, MARK)) == encode(apply_mark(page, MARK))


def test_rebake_marks_large_tiers_and_leaves_small_ones() -> None:
    spec = TierSpec()
    clean = encode(page_image(1000, 700), quality=88)
    marked = rebake({"display": clean}, MARK, spec)["display"]
    before, after = (np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b in (clean, marked))
    where = plan_mark(Image.open(io.BytesIO(clean)), MARK)
    assert where is not None and where.edge == "left"  # the only margin of this page: text runs off its right edge
    box = round(where.box[2] * 1000)
    assert psnr(before[:, box:], after[:, box:]) > 38
    assert psnr(before[:, :box], after[:, :box]) < 25
    small = encode(page_image(300, 210), quality=88)
    assert rebake({"display": small}, MARK, spec) == {"display": small}
    assert rebake({"display": small}, MARK, spec, native_longest_side=3000) != {"display": small}  # a large page's


@pytest.mark.parametrize(
    "size",
    [(20000, 300), (2000, 30), (300, 5), (30, 2000), (2048, 726), (300, 106), (6000, 40), (40, 6000), (1200, 100)],
)
def test_the_mark_covers_a_bounded_share_of_elongated_plates(size: tuple[int, int]) -> None:
    """Fold-outs and scrolls: a 20000x300 master's display tier (2000x30) was 77% darkened, its thumb all of it."""
    page = Image.new("RGB", size, (236, 224, 196))
    marked = np.asarray(apply_mark(page, MARK), dtype=np.int16)
    changed = np.abs(marked[: size[1], : size[0]] - np.asarray(page, dtype=np.int16)).max(axis=2) > 0
    assert changed.mean() <= 0.12, f"{changed.mean():.0%} of {size} covered"
    if min(size) >= 30:  # room for a legible mark: light text drawn on the dark band (or in a strip below)
        assert (marked.min(axis=2) > 240).sum() > 20


def test_marking_in_place_gives_the_same_pixels_as_a_copy() -> None:
    page = page_image(900, 700)
    copy = apply_mark(page, MARK)
    same = apply_mark(page.copy(), MARK, in_place=True)
    assert np.array_equal(np.asarray(copy), np.asarray(same))
