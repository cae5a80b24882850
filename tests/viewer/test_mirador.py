"""A real IIIF viewer: Mirador in headless Chromium opens a demo book's manifest from the app and shows page 1."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession, web
from aiohttp.test_utils import TestServer
from PIL import Image, ImageStat

from imagesvc.app import build_app
from tests.library import copy_library, settings_for

__all__: list[str] = []

ROOT = Path(__file__).resolve().parents[2]
VIEWER = ROOT / "viewer"
BUNDLE = VIEWER / "node_modules" / "mirador" / "dist" / "mirador.min.js"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
BOOK = "demo-speculum-fornacum"
SCREENSHOT_COPY = "IMAGESVC_MIRADOR_SCREENSHOT"  # where to keep a copy of the screenshot (docs/mirador.png)


def _missing() -> str:
    """Why the viewer cannot run here ("" when it can): scripts/install-viewer.sh provides all of it."""
    if shutil.which("node") is None:
        return "node is not installed"
    if not BUNDLE.is_file() or not (VIEWER / "node_modules" / "playwright-core").is_dir():
        return "viewer/node_modules is missing: run scripts/install-viewer.sh"
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is missing: run scripts/install-viewer.sh as root (Debian package chromium)"
    return ""


ON_CI = os.environ.get("CI", "").lower() == "true"
MISSING = _missing()
if MISSING and not ON_CI:
    # At import, so that a machine without the viewer does not build the demo library only to skip.
    pytest.skip(MISSING, allow_module_level=True)


@pytest.fixture(scope="module", autouse=True)
def _viewer_tools() -> None:
    """On CI (CI=true) a missing node, npm package or Chromium is a failure, never a silent skip."""
    if MISSING:
        pytest.fail(f"CI=true and the Mirador viewer cannot run: {MISSING}", pytrace=False)


@pytest.fixture
async def app_server(demo_library: dict[str, Any], tmp_path: Path) -> AsyncIterator[TestServer]:
    """The real app over a private copy of the demo library, on a loopback port."""
    data = copy_library(demo_library["data"], tmp_path / "data")
    server = TestServer(build_app(settings_for(data)), host="127.0.0.1")
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


async def _shoot(page_url: str, out: Path) -> dict[str, Any]:
    """Run viewer/shoot.mjs and return the JSON it prints; the servers keep serving on this loop meanwhile."""
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(VIEWER / "shoot.mjs"),
        page_url,
        str(out),
        "40000",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "CHROMIUM": CHROMIUM},
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, f"shoot.mjs failed ({proc.returncode}): {stderr.decode()[-3000:]}"
    return json.loads(stdout.decode().strip().splitlines()[-1])


def _keep(screenshot: Path, target: Path) -> None:
    """Save a compact copy (256-colour PNG) of the screenshot for the docs."""
    with Image.open(screenshot) as shot:
        shot.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(target, optimize=True)


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
    seen = await _shoot(page_url, out)

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
        _keep(out, Path(os.environ[SCREENSHOT_COPY]))
