"""Every door is metered the same way (docs/architecture.md, rule 7), checked door by door.

The doors are enumerated from the route table (``imagesvc.web.routes.ROUTES``) and the tool registry
(``imagesvc.tools.load_all()``), and each is classified below. For every door: (a) with the caller's pools spent,
nothing priced is delivered (429 on REST, an ``isError`` result on MCP); (b) with the access backend down (a real
Redis, stopped), nothing metered is delivered (503 ``unavailable`` with Retry-After), for anonymous callers, free keys
and uncapped full-tier keys alike. The free doors deliver in both cases, by the one written rule (docs/operations.md).

A route or tool that is not in the tables makes ``test_every_door_is_classified`` fail: a door added later fails
until it is classified here, and so covered by the other tests.
"""

from __future__ import annotations

import base64
import io
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient
from PIL import Image

from imagesvc import tools
from imagesvc.access import MILLI
from imagesvc.access.identity import sign_session
from imagesvc.app import build_app
from imagesvc.catalog import Catalog
from imagesvc.catalog.api_keys import create_key
from imagesvc.web.app_keys import ACCESS
from imagesvc.web.routes import ROUTES
from tests.http.keys import new_key
from tests.library import settings_for
from tests.servers import Redis
from tests.test_faults import assert_unavailable

FREE = "free"  # delivers content that is never counted: the one written rule (docs/operations.md)
PROBE = "free-probe"  # free and delivers nothing: liveness and readiness, which no caller's limits may refuse
TEXT = "text-priced"  # delivers page text: charged to the text pool
IMAGE = "image-priced"  # delivers pixels: charged to the image pool
METADATA = "metadata"  # delivers neither page text nor pixels (catalog rows, URLs, documents, figures)
MCP = "mcp"  # the MCP endpoint: a door per tool, classified in TOOLS
PAGE_TEXT = "page-text-priced"  # a page for people that shows page text: priced like get_quote, refused as HTML
KEY_IMAGE = "key-image-priced"  # bulk page images for keys only (an archive): 401 without a key, else as IMAGE
KEY_METADATA = "key-metadata"  # bulk dataset metadata for keys only: 401 without a key, else as METADATA

SLUG = "demo-speculum-fornacum"

# (method, path as in ROUTES) -> (class, sample path relative to the route's mount, with {book}, {page}, {ill},
# {collection} and {img} filled in from the demo library).
DOORS: dict[tuple[str, str], tuple[str, str]] = {
    ("GET", "/health"): (METADATA, "/health"),
    ("GET", "/health/live"): (PROBE, "/health/live"),
    ("GET", "/health/ready"): (PROBE, "/health/ready"),
    ("GET", "/metrics"): (METADATA, "/metrics"),
    ("GET", "/llms.txt"): (METADATA, "/llms.txt"),
    ("GET", "/img/{path:.+}"): (FREE, "/img/{img}"),
    ("GET", "/iiif/3/manifest/{book_id}"): (METADATA, "/iiif/3/manifest/{book}"),
    ("GET", "/iiif/3/collections"): (METADATA, "/iiif/3/collections"),
    ("GET", "/iiif/3/collection/{slug}"): (METADATA, "/iiif/3/collection/{collection}"),
    ("GET", "/iiif/3/{identifier}"): (METADATA, "/iiif/3/{book}-{page}"),
    ("GET", "/iiif/3/{identifier}/info.json"): (METADATA, "/iiif/3/{book}-{page}/info.json"),
    ("GET", "/iiif/3/{identifier}/{region}/{size}/{rotation}/{quality_format}"): (
        IMAGE,
        "/iiif/3/{book}-{page}/0,0,256,256/max/0/default.jpg",
    ),
    ("GET", "/books"): (METADATA, "/books"),
    ("GET", "/books/{book_id}"): (METADATA, "/books/{book}"),
    ("GET", "/books/{book_id}/quote"): (TEXT, "/books/{book}/quote?page={page}"),
    ("GET", "/books/{book_id}/text"): (TEXT, "/books/{book}/text?from=1&to=2"),
    ("GET", "/books/{book_id}/search"): (TEXT, "/books/{book}/search?q=furnace"),
    ("GET", "/verify"): (TEXT, "/verify?book_id={book}&page={page}"),
    ("GET", "/image"): (IMAGE, "/image?book={book}&page={page}&tier=thumb"),
    ("GET", "/gallery"): (METADATA, "/gallery"),
    ("GET", "/gallery/collections"): (METADATA, "/gallery/collections"),
    ("GET", "/gallery/collections/{slug}"): (METADATA, "/gallery/collections/{collection}"),
    ("GET", "/gallery/images/{id}"): (METADATA, "/gallery/images/{ill}"),
    ("GET", "/books/{book_id}/images"): (METADATA, "/books/{book}/images"),
    ("GET", "/vectors/{store}"): (METADATA, "/vectors/gallery?limit=2"),
    ("GET", "/rate_limit"): (METADATA, "/rate_limit"),
    ("GET", "/dataset/v1/usage"): (METADATA, "/dataset/v1/usage"),
    ("GET", "/dataset/images"): (KEY_METADATA, "/dataset/images?limit=2"),
    ("GET", "/dataset/changes"): (KEY_METADATA, "/dataset/changes?page=1"),
    ("GET", "/books/{book_id}/archive"): (KEY_IMAGE, "/books/{book}/archive?tier=thumb&to=2"),
    ("POST", "/mcp"): (MCP, "/mcp"),
    ("GET", "/mcp"): (METADATA, "/mcp"),
    ("DELETE", "/mcp"): (METADATA, "/mcp"),
    ("GET", "/openapi.json"): (METADATA, "/openapi.json"),
    ("GET", "/books/library"): (METADATA, "/books/library?language=Latin"),
    ("POST", "/gallery/search-by-image"): (METADATA, "/gallery/search-by-image"),  # illustration rows, not pixels
    ("GET", "/"): (METADATA, "/?q=sun"),
    ("GET", "/search-by-image"): (METADATA, "/search-by-image"),  # the upload form
    ("POST", "/search-by-image"): (METADATA, "/search-by-image"),  # a page of illustration cards, not pixels
    ("GET", "/illustration/{id}"): (METADATA, "/illustration/{ill}"),
    ("GET", "/collections"): (METADATA, "/collections"),
    ("GET", "/catalogue"): (METADATA, "/catalogue"),
    ("GET", "/collections/{slug}"): (METADATA, "/collections/{collection}"),
    ("GET", "/book/{slug}"): (PAGE_TEXT, "/book/{book}?page={page}"),  # and ?q=, the same tool as /search
    ("GET", "/static/{path:.+}"): (METADATA, "/static/pages.css"),
    ("GET", "/viewer/{path:.+}"): (METADATA, "/viewer/openseadragon.min.js"),
}

# tool -> (class, sample arguments). MCP results may embed thumbnails: those are the public marked thumb tier, free
# by the same rule as /img/.
TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "list_books": (METADATA, {"limit": 2}),
    "get_book": (METADATA, {"book_id": "{book}"}),
    "get_book_text": (TEXT, {"book_id": "{book}", "from": 1, "to": 2}),
    "get_quote": (TEXT, {"book_id": "{book}", "page": 2}),
    "get_quotes": (TEXT, {"book_id": "{book}", "pages": [1, 2]}),
    "search_within_book": (TEXT, {"book_id": "{book}", "q": "furnace"}),
    "get_book_images": (METADATA, {"book_id": "{book}", "limit": 2}),
    "get_image": (METADATA, {"id": "{ill}"}),
    "search_images": (METADATA, {"type": "plant", "limit": 2}),
    "list_collections": (METADATA, {}),
    "get_collection": (METADATA, {"slug": "{collection}"}),
    "get_vectors": (METADATA, {"store": "gallery", "limit": 2}),
    "search_images_by_image": (METADATA, {"image": "{picture}"}),
    "get_book_archive": (KEY_METADATA, {"book_id": "{book}"}),
    "list_dataset_images": (KEY_METADATA, {"limit": 2}),
    "list_dataset_changes": (KEY_METADATA, {}),
}


def test_every_door_is_classified() -> None:
    routes = {(route.method, route.path) for route in ROUTES}
    assert sorted(routes - DOORS.keys()) == [], "classify these routes in DOORS (and so cover them)"
    assert sorted(DOORS.keys() - routes) == [], "these classified routes no longer exist"
    registered = set(tools.load_all())
    assert sorted(registered - TOOLS.keys()) == [], "classify these tools in TOOLS (and so cover them)"
    assert sorted(TOOLS.keys() - registered) == [], "these classified tools no longer exist"


def _find_img(value: Any) -> str | None:
    """The first /img/ path (public marked tier) anywhere in a JSON document."""
    if isinstance(value, str) and "/img/" in value:
        return value.split("/img/", 1)[1]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    for item in items:
        if (found := _find_img(item)) is not None:
            return found
    return None


async def _samples(client: TestClient, headers: dict[str, str]) -> dict[str, str]:
    """Identifiers of the demo library that every sample path and argument is filled in with."""
    book = await (await client.get(f"/api/books/{SLUG}", headers=headers)).json()
    images = await (await client.get(f"/api/books/{SLUG}/images", headers=headers)).json()
    found = await (await client.get("/api/gallery/collections", headers=headers)).json()
    img = _find_img(book)
    assert img and images["items"] and found["items"], "the demo library has images and collections"
    return {
        "book": book["id"],
        "page": "2",
        "ill": images["items"][0]["id"],
        "collection": found["items"][0]["slug"],
        "img": img,
        "picture": _picture(),
    }


def _picture() -> str:
    """A small JPEG, base64: an upload for search by image."""
    buffer = io.BytesIO()
    Image.radial_gradient("L").convert("RGB").save(buffer, "JPEG")
    return base64.b64encode(buffer.getvalue()).decode()


def _fill(value: Any, samples: dict[str, str]) -> Any:
    if isinstance(value, str):
        return value.format(**samples)
    if isinstance(value, list):
        return [_fill(v, samples) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, samples) for k, v in value.items()}
    return value


def _requests(samples: dict[str, str]) -> Iterator[tuple[str, str, str]]:
    """(method, URL, class) of every REST door, HEAD included for GET routes."""
    for (method, path), (kind, sample) in DOORS.items():
        if kind == MCP:
            continue
        mount = next(route.mount for route in ROUTES if (route.method, route.path) == (method, path))
        url = ("/api" if mount == "api" else "") + sample.format(**samples)
        yield method, url, kind
        if method == "GET":
            yield "HEAD", url, kind


async def _call_tool(client: TestClient, name: str, arguments: dict[str, Any], headers: dict[str, str]) -> Any:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    return await client.post("/api/mcp", json=message, headers={**headers, "Accept": "application/json"})


def _delivers_pixels(resp: ClientResponse) -> bool:
    return resp.content_type.startswith("image/")


# ---- (a) pools spent ----------------------------------------------------------------------------------------------


async def test_with_the_pools_spent_no_door_delivers_anything_priced(client: TestClient, data_dir: Path) -> None:
    user = f"doors-{time.time_ns()}"  # signed in: 1,000 requests an hour, so only budgets can refuse
    headers = {"Authorization": f"Bearer {sign_session(user, int(time.time()) + 3600, 'test-secret')}"}
    samples = await _samples(client, headers)
    access = client.server.app[ACCESS]
    for pool in ("text", "images"):
        held = await access.reserve(f"user:{user}", pool, 1000 * MILLI, 1000 * MILLI)
        assert await access.commit(held)
    for method, url, kind in _requests(samples):
        resp = await client.request(method, url, headers=headers, allow_redirects=False)
        where = (method, url, kind, resp.status)
        if kind in (TEXT, IMAGE):
            assert resp.status == 429 and resp.content_type == "application/json", where
            assert int(resp.headers["Retry-After"]) > 0, where
            if method == "GET":
                body = await resp.json()
                assert (body["error"], body["pool"]) == ("rate_limited", "text" if kind == TEXT else "images"), where
        elif kind == PAGE_TEXT:  # the page says so to a person; none of the page's text is in it
            assert resp.status == 429 and resp.content_type == "text/html", where
            assert int(resp.headers["Retry-After"]) > 0, where
            if method == "GET":
                assert 'class="body"' not in await resp.text(), where
        elif kind == FREE:
            assert resp.status == 200 and _delivers_pixels(resp), where  # the public marked tiers stay free
        elif kind == PROBE:
            assert resp.status == 200 and not _delivers_pixels(resp), where
        elif kind in (KEY_IMAGE, KEY_METADATA):  # a session is no key
            assert resp.status == 401 and resp.content_type == "application/json", where
        else:
            assert resp.status < 500 and not _delivers_pixels(resp), where
    secret, key_id = new_key(data_dir, "free")
    free = {"Authorization": f"Bearer {secret}"}  # a key whose image pool is spent
    held = await access.reserve(f"key:{key_id}", "images", 2000 * MILLI, 2000 * MILLI)
    for method, url, kind in _requests(samples):
        if kind == KEY_IMAGE:
            resp = await client.request(method, url, headers=free)
            assert resp.status == 429 and resp.content_type == "application/json", (method, url)
            assert int(resp.headers["Retry-After"]) > 0
    await access.refund(held)
    for name, (kind, arguments) in TOOLS.items():
        resp = await _call_tool(client, name, _fill(arguments, samples), headers)
        assert resp.status == 200, name
        result = (await resp.json())["result"]
        if kind == TEXT:
            assert result["isError"] is True, name
            assert result["structuredContent"]["error"] == "rate_limited", name
        elif kind == KEY_METADATA:
            assert result["isError"] is True, name
            assert result["structuredContent"]["error"] == "unauthorized", name
        else:
            assert result["isError"] is False, (name, result)


# ---- (b) the access backend down ----------------------------------------------------------------------------------


def _key(data_dir: Path, tier: str) -> str:
    catalog = Catalog(data_dir / "catalog.sqlite3")
    try:
        return create_key(catalog, tier, f"doors {tier}")[0]
    finally:
        catalog.close()


async def test_with_the_access_backend_down_no_door_delivers_anything_metered(
    redis: Redis, data_dir: Path, aiohttp_client: Any
) -> None:
    client: TestClient = await aiohttp_client(
        build_app(settings_for(data_dir, access_backend="redis", redis_url=redis.url))
    )
    callers = {
        "anonymous": {},
        "free key": {"Authorization": f"Bearer {_key(data_dir, 'free')}"},
        "full key": {"Authorization": f"Bearer {_key(data_dir, 'full')}"},
    }
    samples = await _samples(client, callers["full key"])
    redis.stop()
    for who, headers in callers.items():
        for method, url, kind in _requests(samples):
            if kind == IMAGE and who == "full key":
                url += ("&" if "?" in url else "?") + "clean=1"  # clean outputs too
            resp = await client.request(method, url, headers=headers, allow_redirects=False)
            where = (who, method, url, kind, resp.status)
            if kind == PAGE_TEXT:
                assert resp.status == 503 and int(resp.headers["Retry-After"]) > 0, where
                assert 'class="body"' not in await resp.text(), where
            elif kind in (TEXT, IMAGE, KEY_IMAGE):
                if method == "HEAD":
                    assert resp.status == 503 and int(resp.headers["Retry-After"]) > 0, where
                else:
                    await assert_unavailable(resp)
            elif kind == FREE:
                assert resp.status == 200 and _delivers_pixels(resp), where  # never metered, so still served
            elif kind == PROBE:  # alive; not ready, and it says the access backend is what is down, not where it is
                assert resp.status == (503 if url.endswith("/ready") else 200), where
                if resp.status == 503 and method == "GET":
                    text = await resp.text()
                    assert (await resp.json()).get("down") == ["access"], (where, text)
                    assert "127.0.0.1" not in text and str(redis.port) not in text, (where, text)
            else:
                assert resp.status < 500 or resp.status == 503, where
                assert not _delivers_pixels(resp), where
        for size in ("max", "^max", "!90,90"):  # whole pages, upscaled, tiny: none is delivered unmetered
            url = "/iiif/3/{book}-{page}/full/".format(**samples) + f"{size}/0/default.jpg"
            await assert_unavailable(await client.get(url + ("?clean=1" if who == "full key" else ""), headers=headers))
        for name, (kind, arguments) in TOOLS.items():
            resp = await _call_tool(client, name, _fill(arguments, samples), headers)
            if resp.status == 503:  # the request limit could not be checked: the whole POST is refused
                await assert_unavailable(resp)
                continue
            result = (await resp.json())["result"]
            if kind == TEXT:
                assert result["isError"] is True and result["structuredContent"]["error"] == "unavailable", name
