"""Books, pages and the public image prefix over HTTP, on the ingested demo library."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient
from PIL import Image

from imagesvc.catalog import Catalog
from imagesvc.catalog.writes import withdraw_book
from imagesvc.settings import load_settings  # noqa: F401  (documents where settings come from)
from tests.library import SITE

IMAGE_BASE = f"{SITE}/img/"


def _local(url: str) -> str:
    """The app path behind an image URL of the embedded image host."""
    assert url.startswith(IMAGE_BASE), url
    return "/img/" + url.removeprefix(IMAGE_BASE)


async def test_health_reports_storage_and_counts(client: TestClient) -> None:
    resp = await client.get("/health")
    body = await resp.json()
    assert resp.status == 200
    assert body["storage"] == {"backend": "local", "reachable": True}
    assert body["catalog"]["books"] == 4
    assert body["catalog"]["pages"] == 28
    assert body["catalog"]["pages_without_image"] == 1
    assert body["catalog"]["illustrations"] >= 30


async def test_health_counts_follow_a_withdrawal_at_once(client: TestClient, data_dir: Path) -> None:
    """/health reads its counts once per catalog change (they are a scan at the library's size), and a change made
    by another process shows on the next probe."""
    before = (await (await client.get("/health")).json())["catalog"]
    assert (await (await client.get("/health")).json())["catalog"] == before
    catalog = Catalog(data_dir / "catalog.sqlite3")  # the operator's connection, as `imagesvc` commands open it
    with catalog.transaction() as conn:
        withdraw_book(conn, catalog.query_one("SELECT id FROM books ORDER BY id LIMIT 1")["id"])
    catalog.close()
    after = (await (await client.get("/health")).json())["catalog"]
    assert after["books"] == before["books"] - 1 and after["pages"] < before["pages"]


async def test_books_paginate_with_total(client: TestClient) -> None:
    first = await (await client.get("/api/books", params={"limit": 3})).json()
    second = await (await client.get("/api/books", params={"limit": 3, "skip": 3})).json()
    assert first["total"] == second["total"] == 4
    assert first["has_more"] is True and second["has_more"] is False
    slugs = [b["slug"] for b in first["items"] + second["items"]]
    assert len(set(slugs)) == 4


async def test_book_by_slug_and_by_id_agree(client: TestClient) -> None:
    by_slug = await (await client.get("/api/books/demo-speculum-fornacum")).json()
    by_id = await (await client.get(f"/api/books/{by_slug['id']}")).json()
    assert by_slug == by_id
    assert by_slug["doi"] == "10.5281/zenodo.1000001"
    assert by_slug["attribution"]["institution"] == "Demo Library of Generated Scans"
    assert by_slug["summary"].startswith("Demo book generated")
    assert [c["page"] for c in by_slug["chapters"]] == [1, 2, 3, 7]
    assert len(by_slug["pages"]) == 8


async def test_page_without_image_has_no_image_url(client: TestClient) -> None:
    book = await (await client.get("/api/books/demo-traite-des-mines")).json()
    page = next(p for p in book["pages"] if p["page"] == 7)
    assert page["image_unavailable"] is True
    assert not [
        k for k in page if k.startswith("image_") and k not in ("image_unavailable", "image_unavailable_reason")
    ]


async def test_every_tier_fetches_at_its_size(client: TestClient) -> None:
    book = await (await client.get("/api/books/demo-traite-des-mines")).json()
    large = next(p for p in book["pages"] if p["page"] == 2)  # the 4200 px master
    for tier, longest in (("full", 4200), ("display", 2000), ("thumb", 300)):
        resp = await client.get(_local(large[f"image_{tier}"]))
        assert resp.status == 200
        img = Image.open(io.BytesIO(await resp.read()))
        assert img.size == (large["sizes"][tier]["width"], large["sizes"][tier]["height"])
        assert max(img.size) == longest


async def test_unknown_book_is_json_404_with_cors(client: TestClient) -> None:
    resp = await client.get("/api/books/no-such-book")
    body = await resp.json()
    assert resp.status == 404
    assert resp.headers["Access-Control-Allow-Origin"] == "*"
    assert body["error"] == "not_found"
    assert "no-such-book" in body["message"]
    assert body["recovery"]


async def test_preflight_and_unknown_route(client: TestClient) -> None:
    resp = await client.options(
        "/api/books", headers={"Origin": "https://x.example", "Access-Control-Request-Method": "GET"}
    )
    assert resp.status == 204
    assert resp.headers["Access-Control-Allow-Origin"] == "*"
    assert "GET" in resp.headers["Access-Control-Allow-Methods"]
    resp = await client.get("/nowhere")
    assert resp.status == 404
    assert (await resp.json())["error"] == "not_found"
    assert resp.headers["Access-Control-Allow-Origin"] == "*"


async def test_public_images_are_cacheable_with_validators_and_ranges(client: TestClient) -> None:
    book = await (await client.get("/api/books/demo-speculum-fornacum")).json()
    path = _local(book["pages"][0]["image_thumb"])
    resp = await client.get(path)
    body = await resp.read()
    assert resp.headers["Cache-Control"] == "public, max-age=31536000, immutable"
    etag = resp.headers["ETag"]
    assert etag.startswith('"')  # a strong validator
    again = await client.get(path, headers={"If-None-Match": etag})
    assert again.status == 304
    part = await client.get(path, headers={"Range": "bytes=0-99"})
    assert part.status == 206
    assert await part.read() == body[:100]
    assert resp.headers["Access-Control-Allow-Origin"] == "*"


async def test_masters_and_clean_copies_have_no_public_url(client: TestClient, data_dir: Any) -> None:
    book = await (await client.get("/api/books/demo-speculum-fornacum")).json()
    book_id = book["id"]
    for path in (
        f"/img/../masters/{book_id}/1.jpg",
        f"/img/%2e%2e/masters/{book_id}/1.jpg",
        f"/img/../clean/{book_id}/1/full.jpg",
        f"/img/masters/{book_id}/1.jpg",
        f"/img/clean/{book_id}/1/full.jpg",
    ):
        resp = await client.get(path)
        assert resp.status == 404, path
    assert (data_dir / "store" / "masters" / book_id / "1.jpg").is_file()  # it exists; it is just not public


def _walk(value: Any, found: list[str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, str) and (key.startswith("image") or key.endswith(("Url", "_url")) or "img" in item):
                found.append(item)
            _walk(item, found)
    elif isinstance(value, list):
        for item in value:
            _walk(item, found)


async def test_every_image_url_in_every_response_is_on_the_image_host(client: TestClient) -> None:
    listing = await (await client.get("/api/books", params={"limit": 200})).json()
    responses: list[Any] = [listing]
    for book in listing["items"]:
        responses.append(await (await client.get(f"/api/books/{book['slug']}")).json())
    urls: list[str] = []
    for body in responses:
        _walk(body, urls)
    image_urls = [u for u in urls if u.lower().endswith((".jpg", ".jpeg", ".png", ".tif", ".tiff", ".webp"))]
    assert len(image_urls) >= 27 * 3
    assert all(u.startswith(IMAGE_BASE) for u in image_urls), [u for u in image_urls if not u.startswith(IMAGE_BASE)]
    assert "example.org/demo-library/images" not in json.dumps(responses)
