"""render_page: exact tier sizes, byte-copied JPEG masters, determinism, marks only at the bottom, right crops."""

from __future__ import annotations

import io
import pickle
from functools import cache

import numpy as np
import pytest
from PIL import Image

from imagesvc.errors import ImageRejected
from imagesvc.imaging import PageRenditions, TierSpec
from imagesvc.imaging.hashing import hamming
from imagesvc.imaging.marks import marked_size, plan_for, rebake
from imagesvc.imaging.renditions import render_page
from imagesvc.imaging.tiers import fit_size
from tests.imaging.awkward import encode, page_image, woodcut
from tests.imaging.helpers import MARK, SPEC, pixels, psnr

RED, BLUE, GREEN = (200, 20, 20), (20, 30, 210), (20, 160, 40)
BOXES = {(0.1, 0.1, 0.3, 0.2): RED, (0.55, 0.5, 0.35, 0.4): BLUE, (0.05, 0.7, 0.12, 0.1): GREEN}


@cache
def master_jpeg() -> bytes:
    return encode(page_image(3000, 2100, boxes=BOXES), quality=92)


@cache
def marked_page() -> PageRenditions:
    return render_page(master_jpeg(), SPEC, MARK, list(BOXES))


def test_tier_sizes_are_exact_and_full_is_a_byte_copy_of_a_jpeg_master() -> None:
    page = render_page(master_jpeg(), SPEC, None, [])
    assert page.master_format == "JPEG" and (page.width, page.height) == (3000, 2100)
    assert page.clean["full"].data == master_jpeg() and page.public["full"].data == master_jpeg()
    assert [(r.width, r.height) for r in page.clean.values()] == [(3000, 2100), (2000, 1400), (300, 210)]
    for rendition in page.clean.values():
        assert pixels(rendition.data).size == (rendition.width, rendition.height)
        assert rendition.content_type == "image/jpeg"
    assert page.public == page.clean  # no mark: public is clean, byte for byte


def test_small_masters_are_never_enlarged_and_published_unmarked() -> None:
    data = encode(page_image(250, 180), "PNG")
    page = render_page(data, SPEC, MARK, [])
    assert {(r.width, r.height) for r in page.clean.values()} == {(250, 180)}
    assert page.public == page.clean


def test_png_master_full_tier_is_jpeg_at_native_size() -> None:
    page = render_page(encode(page_image(900, 700), "PNG"), SPEC, None, [])
    full = Image.open(io.BytesIO(page.clean["full"].data))
    assert page.master_format == "PNG" and full.format == "JPEG" and full.size == (900, 700)


def test_rendering_is_deterministic() -> None:
    again = render_page(master_jpeg(), SPEC, MARK, list(BOXES))
    first = marked_page()
    assert [r.sha256 for r in again.public.values()] == [r.sha256 for r in first.public.values()]
    assert [(i.phash, i.dhash, i.public["display"].data) for i in again.illustrations] == [
        (i.phash, i.dhash, i.public["display"].data) for i in first.illustrations
    ]


def test_sha256_names_the_bytes() -> None:
    import hashlib

    for rendition in marked_page().public.values():
        assert rendition.sha256 == hashlib.sha256(rendition.data).hexdigest()


@pytest.mark.parametrize("tier", ["full", "display", "thumb"])
def test_marked_tier_differs_from_clean_only_in_its_mark(tier: str) -> None:
    page = marked_page()
    placement = plan_for(pixels(page.clean["display"].data), MARK)
    assert placement is not None
    clean, public = pixels(page.clean[tier].data), pixels(page.public[tier].data)
    assert public.size == marked_size(clean.size, placement)
    a = np.asarray(clean, dtype=np.float64)
    b = np.asarray(public, dtype=np.float64)[: clean.height, : clean.width]
    outside = np.ones(a.shape[:2], dtype=bool)
    if placement.edge != "strip":
        left, top, right, bottom = placement.box
        w, h = clean.size
        outside[round(top * h) : round(bottom * h), round(left * w) : round(right * w)] = False
    top_db = psnr(a[outside], b[outside])
    assert top_db >= 38, f"{tier}: the mark (or re-encoding) changed the page outside its box: {top_db:.1f} dB"
    changed = np.asarray(public, dtype=np.float64).copy()
    changed[: clean.height, : clean.width][outside] = 0
    reference = np.zeros_like(changed)
    reference[: clean.height, : clean.width][~outside] = a[~outside]
    assert np.abs(changed - reference).mean() > 0.5, f"{tier}: no visible mark"


def test_display_matches_a_full_decode_lanczos_reference() -> None:
    page = render_page(master_jpeg(), SPEC, None, [])  # the draft (DCT-scaled) decode path
    reference = Image.open(io.BytesIO(master_jpeg())).convert("RGB").resize((2000, 1400), Image.Resampling.LANCZOS)
    assert psnr(pixels(page.clean["display"].data), reference) >= 35
    marked_path = marked_page()  # the full-decode path must give the same picture
    assert psnr(pixels(marked_path.clean["display"].data), reference) >= 35


def test_rebake_reproduces_the_public_tiers_byte_for_byte() -> None:
    page = marked_page()
    clean = {tier: page.clean[tier].data for tier in ("full", "display", "thumb")}
    again = rebake(clean, MARK, SPEC, native_longest_side=max(page.width, page.height))
    for tier in ("full", "display", "thumb"):
        assert again[tier] == page.public[tier].data, tier


def test_illustrations_crop_the_right_region() -> None:
    page = marked_page()
    assert [i.index for i in page.illustrations] == [0, 1, 2]
    for illus, ((_x, _y, w, h), colour) in zip(page.illustrations, BOXES.items(), strict=True):
        full = illus.clean["full"]
        assert (full.width, full.height) == (round(w * 3000), round(h * 2100))
        mean = np.asarray(pixels(illus.clean["display"].data)).reshape(-1, 3).mean(axis=0)
        assert np.abs(mean - colour).max() < 8, (colour, mean)
        assert len(illus.phash) == 16 and len(illus.dhash) == 16
    # the two large crops carry the page's mark; the small green one (360 px) is published clean
    assert page.illustrations[1].public["display"].data != page.illustrations[1].clean["display"].data
    assert page.illustrations[2].public == page.illustrations[2].clean


def test_hashes_tell_different_illustrations_apart_and_survive_reencoding() -> None:
    text_boxes = [(0.1, 0.1, 0.4, 0.4), (0.5, 0.5, 0.4, 0.4)]
    image = page_image(1500, 1000, seed=3)
    image.paste(woodcut((600, 400), seed=1), (150, 100))
    image.paste(woodcut((600, 400), seed=2), (750, 500))
    from_jpeg = render_page(encode(image, quality=80), SPEC, None, text_boxes).illustrations
    from_png = render_page(encode(image, "PNG"), SPEC, None, text_boxes).illustrations
    for a, b in zip(from_jpeg, from_png, strict=True):
        assert hamming(a.phash, b.phash) <= 10 and hamming(a.dhash, b.dhash) <= 10  # near-duplicate range
    assert hamming(from_png[0].phash, from_png[1].phash) > 12


def test_bboxes_are_clamped_to_the_page() -> None:
    page = render_page(master_jpeg(), SPEC, None, [(0.9, 0.9, 0.5, 0.5)])
    full = page.illustrations[0].clean["full"]
    assert (full.width, full.height) == (300, 210)


@pytest.mark.parametrize(
    "bbox", [(0.2, 0.2, 0.0, 0.3), (1.2, 0.1, 0.3, 0.3), (0.1, 0.1, -0.2, 0.3), (0.1, float("nan"), 1, 1)]
)
def test_empty_or_malformed_bbox_is_rejected_naming_its_index(bbox: tuple[float, float, float, float]) -> None:
    with pytest.raises(ImageRejected, match="illustration 1"):
        render_page(master_jpeg(), SPEC, None, [(0.1, 0.1, 0.2, 0.2), bbox])


def test_bboxes_refer_to_the_oriented_page() -> None:
    from tests.imaging.awkward import exif_rotated_jpeg

    # Stored 800x400 with red at the stored top-left: upright (400x800) the red block is at the top-right.
    page = render_page(exif_rotated_jpeg((800, 400)), TierSpec(), None, [(0.8, 0.0, 0.2, 0.1)])
    mean = np.asarray(pixels(page.illustrations[0].clean["full"].data)).reshape(-1, 3).mean(axis=0)
    assert mean[0] > 240 and mean[1] < 15 and mean[2] < 15


@pytest.mark.parametrize(
    ("size", "longest", "expected"),
    [
        ((6000, 4001), 2000, (2000, 1334)),
        ((4001, 6000), 2000, (1334, 2000)),
        ((900, 2), 300, (300, 1)),
        ((250, 180), 300, (250, 180)),
    ],
)
def test_fit_size_rounds_half_up_and_never_enlarges(
    size: tuple[int, int], longest: int, expected: tuple[int, int]
) -> None:
    assert fit_size(*size, longest) == expected


def test_render_page_and_its_result_cross_process_boundaries() -> None:
    # ingest runs render_page in a process pool: the function and its result must pickle
    page = render_page(encode(page_image(400, 300), "PNG"), SPEC, MARK, [(0.1, 0.1, 0.5, 0.5)])
    assert pickle.loads(pickle.dumps(render_page)) is render_page
    assert pickle.loads(pickle.dumps(page)) == page
