"""The optional faint mark: cropping the mark's box off a marked page no longer leaves the clean page, and the
page still reads as before."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from PIL import Image

from imagesvc.imaging import MarkSpec, TierSpec
from imagesvc.imaging.marks import Placement, apply_faint_mark, apply_mark, plan_mark, rebake
from imagesvc.imaging.tiers import decode, encode_jpeg
from tests.imaging.awkward import page_image

MARK = MarkSpec("A Library of Old Books", "https://library.example/book/herbal?page=3", "A Museum")
SPEC = TierSpec()


def _jpeg_roundtrip(img: Image.Image) -> np.ndarray:
    return np.asarray(decode(encode_jpeg(img, SPEC.quality), SPEC)[1], dtype=np.float64)


def _box(arr: np.ndarray, placement: Placement | None) -> tuple[int, int, int, int]:
    assert placement is not None and not placement.edge.startswith("strip")
    h, w = arr.shape[:2]
    left, top, right, bottom = placement.box
    return round(left * w), round(top * h), round(right * w), round(bottom * h)


def _away_from_mark(arr: np.ndarray, placement: Placement | None) -> np.ndarray:
    """The page beside the mark's box: what a crop that removes the box keeps."""
    left, top, right, bottom = _box(arr, placement)
    assert placement is not None
    return {
        "bottom": arr[:top],
        "top": arr[bottom:],
        "left": arr[:, right:],
        "right": arr[:, :left],
    }[placement.edge]


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a - b) ** 2))
    return float("inf") if mse == 0 else float(10 * np.log10(255**2 / mse))


def test_without_it_a_crop_of_the_box_leaves_the_clean_page() -> None:
    clean = page_image(1400, 2000)
    where = plan_mark(clean, MARK)
    marked = _jpeg_roundtrip(apply_mark(clean, MARK))
    assert _psnr(_away_from_mark(marked, where), _away_from_mark(_jpeg_roundtrip(clean), where)) > 40


def test_with_it_every_part_of_the_cropped_page_still_carries_the_mark() -> None:
    clean = page_image(1400, 2000)
    where = plan_mark(clean, MARK)
    reference = _away_from_mark(_jpeg_roundtrip(clean), where)
    marked = _away_from_mark(_jpeg_roundtrip(apply_mark(clean, replace(MARK, faint=True))), where)
    assert _psnr(marked, reference) < 36  # no longer the clean copy
    diff = np.abs(marked - reference).mean(axis=2)
    rows, cols = 4, 3
    h, w = diff.shape[0] // rows, diff.shape[1] // cols
    for r in range(rows):
        for c in range(cols):
            cell = diff[r * h : (r + 1) * h, c * w : (c + 1) * w]
            assert (cell > 12).mean() > 0.005, (r, c)  # strokes of the mark in every part of the page
    # Unobtrusive: most pixels are untouched beyond JPEG noise, and no stroke is darker than 13 % ink.
    assert (diff > 4).mean() < 0.15
    assert np.percentile(diff, 99.9) < 45


def test_it_follows_the_setting_through_rebake_and_keeps_the_box() -> None:
    page = page_image(900, 1200)
    where = plan_mark(page, MARK)
    clean = {"display": encode_jpeg(page, SPEC.quality)}
    plain, faint = rebake(clean, MARK, SPEC)["display"], rebake(clean, replace(MARK, faint=True), SPEC)["display"]
    a = np.asarray(decode(plain, SPEC)[1], dtype=np.float64)
    b = np.asarray(decode(faint, SPEC)[1], dtype=np.float64)
    assert _psnr(_away_from_mark(a, where), _away_from_mark(b, where)) < 38
    left, top, right, bottom = _box(a, where)
    box_a, box_b = a[top:bottom, left:right], b[top:bottom, left:right]
    assert np.abs(box_a - box_b).mean() < 6  # the box is drawn over the faint mark, as legible as before
    assert repr(MARK) == repr(replace(MARK, faint=True))  # derivation digests do not change with the setting


def test_nothing_drawable_leaves_the_page_as_it_was() -> None:
    img = page_image(400, 300)
    assert np.array_equal(np.asarray(apply_faint_mark(img, MarkSpec("\u200b", "", ""))), np.asarray(img))
