"""The pages in a real browser: headless Chromium (driven by viewer/pages.mjs through playwright-core, which downloads
no browser) searches, opens a result, reads a page in the deep-zoom viewer, copies a citation, and finds a page
without an image, a right-to-left book, no JavaScript, a phone screen and a keyboard all served right."""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageStat

from imagesvc.app import build_app
from tests.browser import MODULES, VIEWER, require, run_driver, save_compact
from tests.library import copy_library, settings_for
from tests.servers import site_server

DRIVER = VIEWER / "pages.mjs"
SCREENSHOTS = "IMAGESVC_PAGES_SCREENSHOTS"  # a folder to keep the screenshots in, as pages-*.png (docs/)

require(MODULES / "openseadragon")


@pytest.fixture
async def site(demo_library: dict[str, Any], tmp_path: Path) -> AsyncIterator[str]:
    """The real app on a loopback port whose site URL is that address, so citation and image URLs lead back to it."""
    data = copy_library(demo_library["data"], tmp_path / "data")
    server = site_server(lambda url: build_app(settings_for(data, site_url=url)))
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


async def drive(site: str, scenario: str, out: Path) -> dict[str, Any]:
    """Run one scenario of viewer/pages.mjs; the app keeps serving on this loop meanwhile."""
    seen = await run_driver(DRIVER, site, str(out), scenario, "30000", timeout=180)
    assert "crash" not in seen, seen["crash"]
    assert seen["blocked"] == [], f"the page tried to leave loopback: {seen['blocked']}"
    assert seen["errors"] == [], f"script errors in the page: {seen['errors']}"
    assert seen["failed"] == [], f"requests failed: {seen['failed']}"
    return seen


def _keep(shot: Path) -> None:
    """A compact copy of a screenshot for the docs, when IMAGESVC_PAGES_SCREENSHOTS names a folder."""
    target = os.environ.get(SCREENSHOTS)
    if target:
        save_compact(shot, Path(target) / f"pages-{shot.name}")


async def test_search_open_a_result_zoom_read_and_copy_a_citation(site: str, tmp_path: Path) -> None:
    seen = await drive(site, "journey", tmp_path)
    assert seen["searchUrl"] == f"{site}/?q=furnace"  # the whole query, and only it, is in the shared URL
    assert seen["results"] >= 3
    assert seen["firstAlt"] == seen["firstDescription"]
    assert seen["readingUrl"].startswith(f"{site}/book/") and "?page=" in seen["readingUrl"]
    # Deep zoom drew tiles from the IIIF image service: JPEG tiles of this page, all delivered.
    page_id = seen["iiif"][0]["id"]
    assert seen["tilesDrawn"] > 0 and len(seen["iiif"]) >= seen["tilesDrawn"]
    assert {(i["id"], i["status"], i["type"]) for i in seen["iiif"]} == {(page_id, 200, "image/jpeg")}
    assert seen["overlays"] >= 1  # the page's illustrations, outlined in the viewer
    assert seen["ocr"] and seen["translation"]
    assert seen["copyButton"] == "Copied"
    # The spec's inline citation, (<Author> <Year>, p. <N>), of whichever book the first result is printed in.
    assert seen["clipboard"] == seen["inline"] and re.fullmatch(r"\(\D+ \d{3,4}, p\. \d+\)", seen["inline"])
    for name in ("gallery.png", "reading.png"):
        with Image.open(tmp_path / name) as shot:
            assert max(ImageStat.Stat(shot.convert("L")).stddev) > 10  # not a blank page
        _keep(tmp_path / name)


async def test_a_page_without_an_image_reads_right(site: str, tmp_path: Path) -> None:
    seen = await drive(site, "missing", tmp_path)
    assert seen["status"] == 200
    assert seen["noteVisible"] and "holds no copy of page 7" in seen["note"]
    assert seen["zoom"] == 0 and seen["viewer"] is None and seen["iiif"] == []
    assert seen["ocr"].startswith("Table des matieres")


async def test_a_hebrew_book_reads_right_to_left(site: str, tmp_path: Path) -> None:
    seen = await drive(site, "rtl", tmp_path)
    assert seen["next"]["x"] < seen["prev"]["x"]  # the next page lies to the left
    assert seen["ocrDirection"] == "rtl" and seen["ocrLang"] == "he"
    assert seen["imageBox"]["x"] > seen["textBox"]["x"]  # the page image comes first, on the right
    assert seen["tilesDrawn"] > 0  # deep zoom works inside the mirrored layout
    assert seen["afterArrowLeft"].endswith("?page=3")  # the left arrow turns to the next page
    assert seen["thumb2"]["x"] < seen["thumb1"]["x"]
    _keep(tmp_path / "rtl.png")


async def test_search_and_reading_work_without_javascript(site: str, tmp_path: Path) -> None:
    seen = await drive(site, "nojs", tmp_path)
    assert seen["results"] >= 3
    assert seen["imageWidth"] > 0 and seen["imageSrc"].startswith(f"{site}/img/")  # the marked display tier
    assert seen["outlines"] == 1 and seen["outlineBox"]["width"] > 50
    assert seen["ocr"] and seen["inline"].endswith("p. 2)")
    assert seen["copyVisible"] is False  # no button that cannot work


async def test_pages_fit_a_phone_screen(site: str, tmp_path: Path) -> None:
    seen = await drive(site, "phone", tmp_path)
    assert seen["widths"] == dict.fromkeys(seen["widths"], seen["viewport"])  # no sideways scrolling
    _keep(tmp_path / "phone.png")


async def test_the_keyboard_reaches_search_and_results(site: str, tmp_path: Path) -> None:
    seen = await drive(site, "keyboard", tmp_path)
    assert seen["focus"][0]["text"] == "Skip to content"
    assert seen["focus"][-1]["id"] == "f-q" and len(seen["focus"]) <= 6
    assert seen["url"] == f"{site}/?q=sun"
    assert "/book/" in seen["opened"]
