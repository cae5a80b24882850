"""The search-by-image page: a page of its own on GET, its form's fields are the tool's arguments, and what the form
sends is read as the REST route reads it."""

from __future__ import annotations

import io

import aiohttp
from aiohttp.test_utils import TestClient
from PIL import Image

from tests.pages.markup import parse

HTML = {"Accept": "text/html,application/xhtml+xml"}


async def test_get_search_by_image_is_the_upload_page_not_a_json_405(client: TestClient) -> None:
    resp = await client.get("/search-by-image", headers=HTML)
    assert resp.status == 200 and resp.content_type == "text/html"
    doc = parse(await resp.text())
    form = doc.one("form", action="/search-by-image")
    assert form.attrs["method"] == "post" and form.attrs["enctype"] == "multipart/form-data"
    assert doc.one("input", name="image").attrs["type"] == "file"
    limit = doc.one("input", name="limit")
    assert (limit.attrs["min"], limit.attrs["max"], limit.attrs["value"]) == ("1", "50", "20")
    doc.one("select", name="book_id")
    books = [o.attrs["value"] for o in doc.all("option")]
    assert books[0] == "" and "demo-sefer-maarekhet-ha-kokhavim" in books


def _picture() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), "white").save(buffer, "JPEG")
    return buffer.getvalue()


async def test_the_forms_book_and_limit_reach_the_tool(client: TestClient) -> None:
    form = aiohttp.FormData()
    form.add_field("image", _picture(), filename="a.jpg", content_type="image/jpeg")
    form.add_field("book_id", "no-such-book")
    resp = await client.post("/search-by-image", data=form, headers=HTML)
    assert resp.status == 404 and resp.content_type == "text/html"
    form = aiohttp.FormData()
    form.add_field("image", _picture(), filename="a.jpg", content_type="image/jpeg")
    form.add_field("limit", "0")
    resp = await client.post("/search-by-image", data=form, headers=HTML)
    assert resp.status == 400 and "at least 1" in await resp.text()
