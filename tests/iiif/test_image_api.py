"""IIIF request parsing into plans, and rendering plans from a tier smaller than the full image."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from imagesvc.errors import InvalidRequest
from imagesvc.iiif.delivery import price_milli
from imagesvc.iiif.image_api import Limits, Plan, parse_request, render
from imagesvc.imaging import TierSpec

LIMITS = Limits(max_width=5000, max_height=5000, max_area=10_000_000)


def plan(
    region: str, size: str = "max", rotation: str = "0", qf: str = "default.jpg", w: int = 1000, h: int = 800
) -> Plan:
    return parse_request(region, size, rotation, qf, w, h, LIMITS)


@pytest.mark.parametrize(
    ("region", "size", "box", "out"),
    [
        ("full", "max", (0, 0, 1000, 800), (1000, 800)),
        ("square", "max", (100, 0, 800, 800), (800, 800)),
        ("900,700,500,500", "max", (900, 700, 100, 100), (100, 100)),  # clipped at the edges
        ("pct:10,10,50,50", "250,", (100, 80, 500, 400), (250, 200)),
        ("full", ",400", (0, 0, 1000, 800), (500, 400)),
        ("full", "pct:25", (0, 0, 1000, 800), (250, 200)),
        ("full", "!300,300", (0, 0, 1000, 800), (300, 240)),
        ("full", "300,100", (0, 0, 1000, 800), (300, 100)),
        ("0,0,100,100", "^250,", (0, 0, 100, 100), (250, 250)),
        ("full", "^max", (0, 0, 1000, 800), (3535, 2828)),  # upscaled to maxArea, aspect kept
    ],
)
def test_regions_and_sizes(region: str, size: str, box: tuple[int, ...], out: tuple[int, int]) -> None:
    p = plan(region, size)
    assert p.region == box and p.size == out


def test_rotation_mirror_and_canonical_form() -> None:
    p = plan("10,20,30,40", "15,", "!90", "color.png")
    assert (p.mirror, p.rotation, p.output_size) == (True, 90, (20, 15))
    assert p.canonical == "10,20,30,40/15,20/!90/default.png"  # color and default give the same pixels


@pytest.mark.parametrize(
    ("region", "size", "rotation", "qf"),
    [
        ("full", "max", "0", "default"),
        ("full", "max", "0", "default.tif"),
        ("full", "max", "0", "best.jpg"),
        ("full", "max", "45", "default.jpg"),
        ("full", "max", "361", "default.jpg"),
        ("full", "full", "0", "default.jpg"),
        ("full", "1001,", "0", "default.jpg"),  # larger than the region without ^
        ("full", "^6000,", "0", "default.jpg"),  # beyond maxWidth even with ^
        ("full", "0,0", "0", "default.jpg"),
        ("full", "!0,0", "0", "default.jpg"),  # zero sizes are 400s, never a 1x1 image
        ("full", "!0,100", "0", "default.jpg"),
        ("full", "!100,0", "0", "default.jpg"),
        ("full", "^!0,0", "0", "default.jpg"),
        ("full", "0,", "0", "default.jpg"),
        ("full", ",0", "0", "default.jpg"),
        ("full", "pct:0", "0", "default.jpg"),
        ("full", "pct:0.01", "0", "default.jpg"),  # rounds to no pixels
        ("full", "!100,", "0", "default.jpg"),
        ("1000,0,10,10", "max", "0", "default.jpg"),  # starts outside the image
        ("0,0,0,10", "max", "0", "default.jpg"),
        ("pct:-1,0,10,10", "max", "0", "default.jpg"),
        ("abc", "max", "0", "default.jpg"),
    ],
)
def test_bad_requests_are_invalid(region: str, size: str, rotation: str, qf: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        plan(region, size, rotation, qf)
    assert info.value.status == 400


def test_render_from_a_half_size_tier_matches_rendering_from_full() -> None:
    rng = np.random.default_rng(7)
    full = Image.fromarray(rng.integers(0, 255, (80, 100, 3), dtype=np.uint8)).resize((1000, 800))
    half = full.resize((500, 400), Image.Resampling.LANCZOS)
    p = plan("200,100,400,400", "100,", "180", "default.png")

    def png(img: Image.Image) -> bytes:
        out = io.BytesIO()
        img.save(out, "PNG")
        return out.getvalue()

    a = np.asarray(Image.open(io.BytesIO(render(png(full), p, (1000, 800), (1000, 800), TierSpec(), 90))), float)
    b = np.asarray(Image.open(io.BytesIO(render(png(half), p, (500, 400), (1000, 800), TierSpec(), 90))), float)
    assert a.shape == b.shape == (100, 100, 3)
    assert np.mean(np.abs(a - b)) < 4


def test_price_is_the_exact_share_of_a_display_area_in_thousandths() -> None:
    assert price_milli(2000, 2000, 2000) == 1000  # one display-size image is one unit
    assert price_milli(4000, 2000, 2000) == 2000
    assert price_milli(6000, 8000, 2000) == 12_000
    assert price_milli(512, 512, 2000) == 66  # 65.536 thousandths, rounded up
    assert price_milli(2000, 1999, 2000) == 1000  # 999.5, rounded up
    assert price_milli(90, 90, 2000) == 3  # 2.025
    assert price_milli(1, 1, 2000) == 1  # never free
    tiles = 24 * 32  # the 512 px tiles of a 12,000 x 16,000 page at full resolution
    assert tiles * price_milli(512, 512, 2000) >= 12_000 * 16_000 * 1000 // (2000 * 2000)  # tiling never pays less
