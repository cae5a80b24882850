"""A real IIIF viewer: Mirador in headless Chromium opens a demo book's manifest from the app and shows page 1."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession, web
from aiohttp.test_utils import TestServer
from PIL import Image, ImageStat

from imagesvc.app import build_app
from tests.browser import VIEWER, require, run_driver, save_compact
from tests.library import copy_library, settings_for
from tests.servers import site_server

__all__: list[str] = []

BUNDLE = VIEWER / "node_modules" / "mirador" / "dist" / "mirador.min.js"
BOOK = "demo-speculum-fornacum"
SCREENSHOT_COPY = "IMAGESVC_MIRADOR_SCREENSHOT"  # where to keep a copy of the screenshot (docs/mirador.png)

require(BUNDLE)


@pytest.fixture
async def app_server(demo_library: dict[str, Any], tmp_path: Path) -> AsyncIterator[TestServer]:
    """The real app over a private copy of the demo library, on a loopback port."""
    data = copy_library(demo_library["data"], tmp_path / "data")
    # the site URL is where the viewer reaches us: IIIF ids are built from it
    server = site_server(lambda url: build_app(settings_for(data, site_url=url)))
    await server.start_server()
    try:
        yield server
    finally:
        await server.close()


@pytest.fixture
async def viewer_server() -> AsyncIterator[TestServer]:
    """A second loopback origin serving only the viewer page and Mirador's prebuilt bundle (no CDN, no build)."""
    files = {"/": VIEWER / "index.html", "/mirador.min.js": BUNDLE}

    async def serve(request: web.Request) -> web.FileResponse:
        return web.FileResponse(files[request.path])

    app = web.Application()
    for route in files:
        app.router.add_get(route, serve)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield server
    finally:
        await server.close()


async def test_mirador_shows_the_first_page_of_a_demo_book(
    app_server: TestServer, viewer_server: TestServer, tmp_path: Path
) -> None:
    manifest_url = str(app_server.make_url(f"/iiif/3/manifest/{BOOK}"))
    # What the viewer should show, read from the app the way any client would.
    async with ClientSession() as session, session.get(manifest_url) as resp:
        assert resp.status == 200
        manifest = await resp.json(content_type=None)
    first = manifest["items"][0]
    painting = first["items"][0]["items"][0]["body"]
    first_id = painting["service"][0]["id"].rsplit("/", 1)[1]

    page_url = str(viewer_server.make_url("/").with_query(manifest=manifest_url))
    out = tmp_path / "mirador.png"
    seen = await run_driver(VIEWER / "shoot.mjs", page_url, str(out), "40000", timeout=120)

    assert seen["blocked"] == [], f"the page tried to leave loopback: {seen['blocked']}"
    assert seen["errors"] == [], f"script errors in the page: {seen['errors']}"
    # The window's title bar names the book as the manifest labels it.
    (title,) = next(iter(manifest["label"].values()))
    assert seen["windowTitle"] == title
    # The first page's image came from this app's Image API, as a deep-zoom tile or level (not only a thumbnail).
    ours = [i for i in seen["images"] if i["id"] == first_id and i["status"] == 200]
    assert ours, f"no image of {first_id} was delivered: {seen['images'][:10]}"
    assert all(i["type"] == "image/jpeg" for i in ours)
    assert not [i for i in seen["images"] if i["status"] >= 400], "some image requests failed"
    # OpenSeadragon's canvas shows the page: many pixels differ from the empty background, in many colours.
    assert seen["canvas"]["differing"] > 0.2, seen["canvas"]
    assert seen["canvas"]["colours"] > 64, seen["canvas"]
    with Image.open(out) as shot:
        assert shot.size == (1100, 760)
        assert max(ImageStat.Stat(shot.convert("L")).stddev) > 10  # not a blank or single-colour page
    if os.environ.get(SCREENSHOT_COPY):
        save_compact(out, Path(os.environ[SCREENSHOT_COPY]))
