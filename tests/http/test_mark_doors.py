"""The visible mark at every door that delivers a marked image: it is there, and it leaves the page's content as the
clean copy has it, on a page whose text runs to every edge, a plate that bleeds off the page (with an illustration
cut from it) and a page with margins. ``clean=1`` still gives the clean copy byte for byte."""

from __future__ import annotations

import base64
import io
import json
import re
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp.test_utils import TestClient
from PIL import Image

from fixtures.edge_pages import page
from imagesvc.app import build_app
from imagesvc.catalog import Catalog
from tests.http.keys import new_key
from tests.library import copy_library, run_ingest, settings_for

SLUG = "edge-to-edge"
PAGES = {1: ("full", 7), 2: ("plate", 3), 3: ("ordinary", 5)}  # number: (kind, seed) of fixtures/edge_pages.py
PLATE_CROP = (0.1, 0.1, 0.8, 0.5)  # an illustration of page 2: plate to every edge of the crop
INK_CHANGED_MAX = 0.001  # the bound: at most 0.1 % of the clean page's ink changed by more than 24 levels


@pytest.fixture(scope="module")
def edge_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("edge-library")
    src = root / "src"
    src.mkdir()
    pages = []
    for number, (kind, seed) in PAGES.items():
        shown = page(kind, seed)
        master = shown.resize((shown.width * 2, shown.height * 2), Image.Resampling.BICUBIC)  # full > display
        master.save(src / f"p{number}.jpg", quality=92)
        entry: dict[str, Any] = {"number": number, "image": f"p{number}.jpg"}
        if number == 2:
            x, y, w, h = PLATE_CROP
            entry["illustrations"] = [{"bbox": {"x": x, "y": y, "width": w, "height": h}, "type": "engraving"}]
        pages.append(entry)
    book = {
        "slug": SLUG,
        "title": "Pages to the edge",
        "author": "Generated for tests",
        "language": "Latin",
        "attribution": {"institution": "Test Library", "item_url": "https://example.org/item/edge"},
        "pages": pages,
    }
    manifest = src / "manifest.json"
    manifest.write_text(json.dumps({"version": 1, "books": [book]}))
    data = root / "data"
    summary = run_ingest(manifest, settings_for(data))
    assert not summary.refused
    return data


@pytest.fixture
async def edge_client(aiohttp_client: Any, edge_data: Path, tmp_path: Path) -> TestClient:
    data = copy_library(edge_data, tmp_path / "data")
    return await aiohttp_client(build_app(settings_for(data)))


def _decode(data: bytes) -> Image.Image:
    with Image.open(io.BytesIO(data)) as img:
        return img.convert("RGB")


def _clean(data_dir: Path, owner_of: str, tier: str) -> Image.Image:
    """The stored clean copy of ``tier`` of a page (``p<n>``) or of page 2's illustration (``ill``)."""
    catalog = Catalog(data_dir / "catalog.sqlite3")
    try:
        book = catalog.find_book(SLUG)
        assert book is not None
        if owner_of == "ill":
            owner = catalog.book_illustrations(book["id"])[0]["id"]
        else:
            owner = catalog.page(book["id"], int(owner_of[1:]))["id"]
        row = catalog.renditions([owner])[owner][tier]
    finally:
        catalog.close()
    return _decode((data_dir / "store" / row["clean_key"]).read_bytes())


def ink_changed(clean: Image.Image, marked: Image.Image) -> float:
    """The share of ``clean``'s ink (40 levels or more below its paper) that ``marked`` changes by more than 24."""
    a = np.asarray(clean.convert("L"), dtype=np.int16)
    b = np.asarray(marked.convert("L"), dtype=np.int16)[: a.shape[0], : a.shape[1]]
    ink = a <= np.percentile(a, 90) - 40
    return float((ink & (np.abs(a - b) > 24)).sum() / max(1, ink.sum()))


def assert_marked_around_content(marked_bytes: bytes, clean: Image.Image, where: str) -> None:
    """``marked_bytes`` holds ``clean``'s page with its content untouched, and a mark: its light text on a dark band,
    in a strip outside the page or in a margin box."""
    marked = _decode(marked_bytes)
    assert marked.width >= clean.width and marked.height >= clean.height, where
    share = ink_changed(clean, marked)
    assert share <= INK_CHANGED_MAX, f"{where}: the mark changed {share:.3%} of the page's ink"
    pixels = np.asarray(marked.convert("L"), dtype=np.int16)
    if marked.size != clean.size:  # a strip outside the page: dark, with light text
        # The strip starts at the next 16-px block boundary (the page's edge repeated up to it).
        strip = (
            pixels[-(-clean.height // 16) * 16 :]
            if marked.height > clean.height
            else pixels[:, -(-clean.width // 16) * 16 :]
        )
        assert np.median(strip) < 80 and (strip > 150).sum() > min(30, strip.size // 20), (
            f"{where}: no mark in the strip"
        )
    else:  # a box in a margin: it changed some paper, and carries light text
        changed = np.abs(pixels - np.asarray(clean.convert("L"), dtype=np.int16)) > 24
        assert changed.sum() > 200, f"{where}: no mark"


async def _get(client: TestClient, url: str, **kwargs: Any) -> bytes:
    resp = await client.get(url, **kwargs)
    assert resp.status == 200, (url, resp.status, await resp.text())
    return await resp.read()


@pytest.mark.slow
async def test_every_door_delivers_the_mark_beside_the_content(edge_client: TestClient, tmp_path: Path) -> None:
    data = tmp_path / "data"
    key, _ = new_key(data, "full")
    auth = {"Authorization": f"Bearer {key}"}
    book = await (await edge_client.get(f"/api/books/{SLUG}")).json()
    images = await (await edge_client.get(f"/api/books/{SLUG}/images")).json()
    ill = images["items"][0]["id"]
    owners = {**{f"p{n}": {"book": SLUG, "page": str(n)} for n in PAGES}, "ill": {"illustration": ill}}
    strips = 0
    for owner, where in owners.items():
        for tier in ("full", "display", "thumb"):
            clean = _clean(data, owner, tier)
            # REST /api/image, anonymous (the stored public tier) and keyed (signed for the key per request)
            anonymous = await _get(edge_client, "/api/image", params={**where, "tier": tier})
            assert_marked_around_content(anonymous, clean, f"/api/image {owner} {tier}")
            keyed = await _get(edge_client, "/api/image", params={**where, "tier": tier}, headers=auth)
            assert_marked_around_content(keyed, clean, f"/api/image keyed {owner} {tier}")
            strips += _decode(anonymous).size != clean.size
            # clean=1: the clean copy, its pixels and size as stored
            unmarked = _decode(
                await _get(edge_client, "/api/image", params={**where, "tier": tier, "clean": "1"}, headers=auth)
            )
            assert unmarked.size == clean.size and ink_changed(clean, unmarked) == 0.0
    assert strips >= 6, "the page and plate whose content runs to the edges carry their mark in a strip"
    # The public tiers as the image host serves them (the URLs the book lists)
    for entry in book["pages"]:
        for tier, url in (entry.get("images") or {}).items():
            if "/img/" in str(url) and tier in ("full", "display", "thumb"):
                body = await _get(edge_client, "/img/" + str(url).split("/img/", 1)[1])
                assert_marked_around_content(body, _clean(data, f"p{entry['number']}", tier), f"/img/ {tier}")


@pytest.mark.slow
async def test_iiif_serves_the_marked_image_and_says_its_true_size(edge_client: TestClient, tmp_path: Path) -> None:
    data = tmp_path / "data"
    key, _ = new_key(data, "full")
    for number in PAGES:
        ident = f"{SLUG}-{number}"
        info = await (await edge_client.get(f"/iiif/3/{ident}/info.json")).json()
        whole = _decode(await _get(edge_client, f"/iiif/3/{ident}/full/max/0/default.jpg"))
        assert (info["width"], info["height"]) == whole.size  # info.json describes the image it serves
        clean = _clean(data, f"p{number}", "full")
        assert_marked_around_content(
            await _get(edge_client, f"/iiif/3/{ident}/full/max/0/default.jpg"), clean, f"IIIF {ident}"
        )
        for size in info["sizes"]:  # every advertised size is served at that size
            got = _decode(
                await _get(edge_client, f"/iiif/3/{ident}/full/{size['width']},{size['height']}/0/default.jpg")
            )
            assert got.size == (size["width"], size["height"])
        clean_info = await (
            await edge_client.get(
                f"/iiif/3/{ident}/info.json", params={"clean": "1"}, headers={"Authorization": f"Bearer {key}"}
            )
        ).json()
        assert (clean_info["width"], clean_info["height"]) == clean.size  # the clean image: the page's own size
        manifest = await (await edge_client.get(f"/iiif/3/manifest/{SLUG}")).json()
        canvas = manifest["items"][number - 1]
        assert (canvas["width"], canvas["height"]) == whole.size  # the canvas is the marked image it paints


@pytest.mark.slow
async def test_mcp_thumbnails_and_archives_carry_the_mark_beside_the_content(
    edge_client: TestClient, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    key, _ = new_key(data, "full")
    auth = {"Authorization": f"Bearer {key}"}
    images = await (await edge_client.get(f"/api/books/{SLUG}/images")).json()
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "get_image", "arguments": {"id": images["items"][0]["id"], "include_images": True}},
    }
    resp = await edge_client.post("/api/mcp", json=message, headers={"Accept": "application/json"})
    content = (await resp.json())["result"]["content"]
    pictures = [base64.b64decode(block["data"]) for block in content if block["type"] == "image"]
    assert pictures, "get_image shows the illustration's thumbnail"
    for picture in pictures:
        assert_marked_around_content(picture, _clean(data, "ill", "thumb"), "MCP get_image thumbnail")
    body = await _get(edge_client, f"/api/books/{SLUG}/archive", params={"tier": "display"}, headers=auth)
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        names = [n for n in archive.namelist() if n.endswith(".jpg")]
        assert len(names) == len(PAGES)
        for name in names:
            number = int(re.findall(r"\d+", name.rsplit("/", 1)[-1])[0])
            clean = _clean(data, f"p{number}", "display")
            assert_marked_around_content(archive.read(name), clean, f"archive {name}")
