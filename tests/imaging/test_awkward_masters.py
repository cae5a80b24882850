"""Awkward masters: every colour mode comes out as correct 8-bit sRGB, and bad data is refused with ImageRejected."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from imagesvc.errors import ImageRejected
from imagesvc.imaging import TierSpec
from imagesvc.imaging.refusals import reason_of
from imagesvc.imaging.renditions import render_page
from tests.imaging import awkward
from tests.imaging.helpers import SPEC, pixels


def close(actual: tuple[int, ...], expected: tuple[int, ...], tolerance: int = 6) -> bool:
    return all(abs(a - e) <= tolerance for a, e in zip(actual, expected, strict=True))


def display(data: bytes):
    return pixels(render_page(data, SPEC, None, []).clean["display"].data)


def test_cmyk_jpeg_keeps_its_colours_and_full_is_reencoded_as_rgb() -> None:
    page = render_page(awkward.cmyk_jpeg(), SPEC, None, [])
    img = pixels(page.clean["display"].data)
    assert close(img.getpixel((10, 10)), (255, 0, 0))
    assert close(img.getpixel((img.width - 10, 10)), (0, 0, 255))
    full = pixels(page.clean["full"].data)
    assert full.size == (700, 500) and close(full.getpixel((10, 10)), (255, 0, 0))


def test_16_bit_rgb_png_is_scaled_not_clipped() -> None:
    assert close(display(awkward.rgb16_png()).getpixel((5, 5)), (255, 128, 0), 3)


def test_16_bit_grayscale_tiff_is_scaled_to_mid_grey() -> None:
    assert close(display(awkward.gray16_tiff(value=32768)).getpixel((5, 5)), (128, 128, 128), 2)


def test_palette_transparency_flattens_onto_white() -> None:
    img = display(awkward.palette_alpha_png())
    assert close(img.getpixel((5, 5)), (255, 255, 255))
    assert close(img.getpixel((img.width - 5, 5)), (0, 200, 0))


def test_rgba_flattens_half_transparent_blue_onto_white() -> None:
    assert close(display(awkward.rgba_png()).getpixel((5, 5)), (127, 127, 255))


def test_exif_orientation_6_is_applied_to_sizes_and_pixels() -> None:
    page = render_page(awkward.exif_rotated_jpeg((800, 400)), SPEC, None, [])
    assert (page.width, page.height) == (400, 800)
    assert (page.clean["full"].width, page.clean["full"].height) == (400, 800)
    img = pixels(page.clean["display"].data)
    assert img.size == (400, 800)
    assert close(img.getpixel((img.width - 5, 5)), (255, 0, 0))  # stored top-left shows at the top-right
    assert close(img.getpixel((5, 5)), (255, 255, 255))


def test_a_jpeg_master_stored_sideways_is_stored_upright_as_the_clean_full_tier() -> None:
    page = render_page(awkward.exif_rotated_jpeg((800, 400)), SPEC, None, [])
    full = Image.open(io.BytesIO(page.clean["full"].data))  # as a reader that ignores EXIF orientation sees it
    assert full.size == (page.clean["full"].width, page.clean["full"].height) == (400, 800)
    assert full.getexif().get(0x0112, 1) == 1  # no rotation left for anyone to apply
    assert close(full.convert("RGB").getpixel((full.width - 5, 5)), (255, 0, 0))


def test_exif_orientation_is_applied_on_the_draft_path_too() -> None:
    page = render_page(awkward.exif_rotated_jpeg((4000, 2000)), SPEC, None, [])
    img = pixels(page.clean["display"].data)
    assert img.size == (1000, 2000)
    assert close(img.getpixel((img.width - 5, 5)), (255, 0, 0))


def test_icc_profile_is_converted_to_srgb() -> None:
    # Red pixels tagged with a profile whose red primary is sRGB's blue must come out blue.
    assert close(display(awkward.icc_swapped_jpeg()).getpixel((20, 20)), (0, 0, 255), 12)


@pytest.mark.parametrize(
    ("data", "reason", "words"),
    [
        (awkward.truncated_jpeg(), "truncated", "ends before the image is complete"),
        (awkward.garbage(), "unsupported_format", "not a recognised image format"),
        (b"", "unsupported_format", "not a recognised image format"),
    ],
)
def test_broken_data_is_rejected_with_a_reason(data: bytes, reason: str, words: str) -> None:
    with pytest.raises(ImageRejected, match=words) as info:
        render_page(data, SPEC, None, [])
    assert reason_of(info.value) == reason
    assert "OSError" not in info.value.message and "Pillow" not in info.value.message


def test_decompression_bomb_is_refused_from_its_header_with_the_limit_named() -> None:
    # The bomb's data covers only its first rows: a refusal naming the pixel limit (not "truncated") shows the size
    # was refused from the header, before any pixel was decoded; no clock needed.
    with pytest.raises(ImageRejected, match="decompression bomb") as info:
        render_page(awkward.bomb_png(30_000, 30_000), SPEC, None, [])
    message = info.value.message
    assert "250,000,000" in message and "IMAGESVC_MAX_IMAGE_PIXELS" in message
    assert "500000000" not in message.replace(",", "") and "900000000" not in message.replace(",", "")
    assert reason_of(info.value) == "too_large"


def test_our_pixel_limit_applies_below_pillows() -> None:
    spec = TierSpec(max_pixels=1_000_000)
    with pytest.raises(ImageRejected, match=r"2000x1000 = 2,000,000 pixels; the limit is 1,000,000") as info:
        render_page(awkward.bomb_png(2000, 1000), spec, None, [])
    assert info.value.details["max_pixels"] == 1_000_000


def test_a_side_too_long_for_jpeg_is_refused() -> None:
    with pytest.raises(ImageRejected, match="65500"):
        render_page(awkward.bomb_png(70_000, 10), SPEC, None, [])
