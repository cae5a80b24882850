"""Book and reading pages over HTTP: the citation URL opens the page with the get_quote tool's text and citations,
costs what the API charges for that text, and errors read as pages for a person with the API's status."""

from __future__ import annotations

import re
from pathlib import Path

from aiohttp.test_utils import TestClient

from imagesvc.access import MILLI
from imagesvc.access.policy import PAGE_VIEWS
from imagesvc.web.app_keys import ACCESS
from tests.library import SITE
from tests.pages.markup import parse

HTML = {"Accept": "text/html,application/xhtml+xml"}
SPECULUM = "demo-speculum-fornacum"
MINES = "demo-traite-des-mines"
HEBREW = "demo-sefer-maarekhet-ha-kokhavim"
ANONYMOUS = "ip:127.0.0.1"


def remaining(resp_headers: object) -> dict[str, int]:
    """``{pool: remaining}`` from an IETF ``RateLimit`` header."""
    return {m[0]: int(m[1]) for m in re.findall(r'"(\w+)";r=(\d+)', resp_headers["RateLimit"])}  # type: ignore[index]


async def test_the_citation_url_opens_the_page_with_the_quote_tools_text(client: TestClient) -> None:
    api = await (await client.get(f"/api/books/{SPECULUM}/quote", params={"page": "3"})).json()
    url = api["citation"]["citation_url"]
    assert url == f"{SITE}/book/{SPECULUM}?page=3"
    resp = await client.get(url.removeprefix(SITE), headers=HTML)
    assert resp.status == 200 and resp.content_type == "text/html"
    assert resp.headers["Cache-Control"] == "private, no-store"
    doc = parse(await resp.text())
    bodies = doc.all("div", cls="body")
    assert [b.text for b in bodies] == [" ".join(api["quote"][f].split()) for f in ("ocr", "translation", "original")]
    for kind in ("inline", "footnote", "bibliography", "url"):
        assert doc.by_id(f"cite-{kind}").text == api["citation"]["citation_url" if kind == "url" else kind]
    assert doc.one("link", rel="canonical").attrs["href"] == url
    assert {a.attrs["href"] for a in doc.all("a", cls="prev")} == {f"/book/{SPECULUM}?page=2"}
    assert {a.attrs["href"] for a in doc.all("a", cls="next")} == {f"/book/{SPECULUM}?page=4"}
    # The page image: the public display tier (marked) from the image host, and the IIIF service for deep zoom.
    book = await (await client.get(f"/api/books/{SPECULUM}")).json()
    page3 = book["pages"][2]
    (img,) = doc.all("img")
    assert img.attrs["src"] == page3["image_display"] and img.attrs["alt"].startswith("Page 3 of ")
    assert doc.by_id("zoom").attrs["data-iiif"] == f"/iiif/3/{book['id']}-3/info.json"
    assert "clean=" not in await resp.text()  # the viewer asks IIIF for the marked pixels, as any anonymous client
    head = await client.head(url.removeprefix(SITE), headers=HTML)
    assert head.status == 200 and head.content_type == "text/html"


async def test_the_pages_illustrations_are_outlined_and_linked(client: TestClient) -> None:
    items = (await (await client.get(f"/api/books/{SPECULUM}/images")).json())["items"]
    on_page = [i for i in items if i["page"] == 6]
    assert len(on_page) >= 2
    doc = parse(await (await client.get(f"/book/{SPECULUM}?page=6", headers=HTML)).text())
    outlines = doc.all("a", cls="outline")
    assert [a.attrs["href"] for a in outlines] == [f"/illustration/{i['id']}" for i in on_page]
    for a, item in zip(outlines, on_page, strict=True):
        assert float(a.attrs["data-x"]) == item["bbox"]["x"] and float(a.attrs["data-w"]) == item["bbox"]["width"]
        assert item["description"] in a.text


async def test_the_book_page_has_metadata_attribution_chapters_and_thumbnails(client: TestClient) -> None:
    book = await (await client.get(f"/api/books/{MINES}")).json()
    resp = await client.get(f"/book/{MINES}", headers=HTML)
    doc = parse(await resp.text())
    assert resp.status == 200
    assert doc.one("h1").text == book["title"]
    institution = book["attribution"]["institution"]
    assert [a.attrs["href"] for a in doc.all("a") if a.text == institution] == [book["attribution"]["institution_url"]]
    for chapter in book["chapters"]:
        assert doc.all("a", href=f"/book/{MINES}?page={chapter['page']}")
    thumbs = [img.attrs["src"] for img in doc.all("img")]
    assert thumbs == [p["image_thumb"] for p in book["pages"] if not p.get("image_unavailable")]
    held = [p for p in book["pages"] if p.get("image_unavailable")]
    assert held and len(doc.all("span", cls="noimage")) == len(held)
    # Nothing on the page loads or links an originating institution's image: every image is on the image host.
    item_url = book["attribution"]["item_url"]
    assert all(src.startswith(f"{SITE}/img/") for src in thumbs)
    assert not [e for e in doc.elements if item_url and item_url in (e.attrs.get("href", "") + e.attrs.get("src", ""))]


async def test_a_page_without_an_image_says_so_and_still_shows_its_text(client: TestClient) -> None:
    resp = await client.get(f"/book/{MINES}?page=7", headers=HTML)
    doc = parse(await resp.text())
    assert resp.status == 200
    note = doc.by_id("image-unavailable")
    assert "holds no copy of page 7" in note.text
    assert not doc.all(id="zoom") and not doc.all("img")
    quote = await (await client.get(f"/api/books/{MINES}/quote", params={"page": "7"})).json()
    assert quote["quote"]["ocr"] in doc.one("section", cls="col-ocr").text


async def test_a_right_to_left_book_is_laid_out_right_to_left(client: TestClient) -> None:
    doc = parse(await (await client.get(f"/book/{HEBREW}?page=2", headers=HTML)).text())
    assert doc.one("article", cls="reading").attrs["data-direction"] == "rtl"
    assert {nav.attrs.get("dir") for nav in doc.all("nav", cls="pager")} == {"rtl"}
    hebrew = [e for e in doc.all("div", cls="body") if e.attrs["lang"] == "he"]  # OCR and original
    assert len(hebrew) == 2 and all(e.attrs["dir"] == "auto" for e in hebrew)
    book = parse(await (await client.get(f"/book/{HEBREW}", headers=HTML)).text())
    assert book.one("ol", cls="pages").attrs["dir"] == "rtl"
    latin = parse(await (await client.get(f"/book/{SPECULUM}", headers=HTML)).text())
    assert "dir" not in latin.one("ol", cls="pages").attrs


async def test_errors_are_pages_for_people_and_json_for_the_api(client: TestClient) -> None:
    out_of_range = await client.get(f"/book/{SPECULUM}?page=99", headers=HTML)
    assert out_of_range.status == 404 and out_of_range.content_type == "text/html"
    doc = parse(await out_of_range.text())
    assert "has no page 99; it has pages 1–8" in doc.one("p", cls="message").text
    assert doc.all("a", href=f"/book/{SPECULUM}?page=1")
    unknown = await client.get("/book/no-such-book?page=1", headers=HTML)
    assert unknown.status == 404 and "no-such-book" in parse(await unknown.text()).one("p", cls="message").text
    bad = await client.get(f"/book/{SPECULUM}?page=first", headers=HTML)
    assert bad.status == 400 and bad.content_type == "text/html"
    nowhere = await client.get("/no/such/page", headers=HTML)
    assert nowhere.status == 404 and nowhere.content_type == "text/html"
    # The API keeps the one JSON error shape, whatever the client accepts.
    for path in ("/api/books/no-such-book", "/api/no/such/route", "/iiif/3/nope/info.json"):
        resp = await client.get(path, headers=HTML)
        assert resp.status == 404 and (await resp.json())["error"] == "not_found", path
    assert (await client.get("/no/such/page")).content_type == "application/json"  # a script, not a browser


async def test_a_reading_page_costs_what_the_quote_costs(client: TestClient) -> None:
    api = await client.get(f"/api/books/{SPECULUM}/quote", params={"page": "3"})
    before = remaining(api.headers)
    page = await client.get(f"/book/{SPECULUM}?page=4", headers=HTML)
    after = remaining(page.headers)
    assert before["text"] - after["text"] == 1  # one text unit, as /quote charges
    assert "requests" not in after  # a page view, not an API request (docs/api.md, Callers and limits)
    for free in ("/static/pages.css", "/static/pages.js", "/viewer/openseadragon.min.js"):
        resp = await client.get(free)
        assert "RateLimit" not in resp.headers, free  # counted nowhere (the viewer may not be installed here)
        assert resp.status == 200 or free.startswith("/viewer/"), free
    gallery = await client.get("/", headers=HTML)
    book = await client.get(f"/book/{SPECULUM}", headers=HTML)
    assert remaining(gallery.headers) == {"page_views": after["page_views"] - 1}  # no budget, one page view
    assert remaining(book.headers) == {"page_views": after["page_views"] - 2}
    again = await client.get(f"/api/books/{SPECULUM}/quote", params={"page": "3"})
    assert remaining(again.headers)["requests"] == before["requests"] - 1  # the API's count: its own calls only
    usage = await (await client.get("/api/rate_limit")).json()
    assert usage["pools"]["text"]["used"] == 3 and usage["pools"]["images"]["used"] == 0


async def test_with_the_text_budget_spent_the_page_shows_the_image_and_says_when(client: TestClient) -> None:
    access = client.server.app[ACCESS]
    assert await access.commit(await access.reserve(ANONYMOUS, "text", 500 * MILLI, 500 * MILLI))
    resp = await client.get(f"/book/{SPECULUM}?page=3", headers=HTML)
    assert resp.status == 429 and resp.content_type == "text/html"
    assert int(resp.headers["Retry-After"]) > 0
    doc = parse(await resp.text())
    assert "text allowance is used up" in doc.one("div", role="alert").text
    assert doc.by_id("zoom") and not doc.all("section", cls="col-ocr")
    assert (await client.get(f"/api/books/{SPECULUM}/quote", params={"page": "3"})).status == 429


async def test_the_page_view_pace_reads_as_a_page_and_the_api_limit_as_json(client: TestClient) -> None:
    access = client.server.app[ACCESS]
    for _ in range(PAGE_VIEWS):
        await access.hit(f"{ANONYMOUS}#pages", PAGE_VIEWS, 60)
    resp = await client.get("/", headers=HTML)
    assert resp.status == 429 and resp.content_type == "text/html" and int(resp.headers["Retry-After"]) > 0
    assert "try again in" in parse(await resp.text()).one("section", cls="error").text
    assert (await client.get("/api/books")).status == 200  # page views are not API requests
    for _ in range(59):
        await access.hit(ANONYMOUS, 60, 3600)
    api = await client.get("/api/books")
    assert api.status == 429 and (await api.json())["error"] == "rate_limited"


async def test_without_the_viewer_the_page_still_reads_and_says_why(make_client: object, tmp_path: Path) -> None:
    client = await make_client(viewer_dir=str(tmp_path / "no-viewer"))  # type: ignore[operator]
    doc = parse(await (await client.get(f"/book/{SPECULUM}?page=2", headers=HTML)).text())
    assert "Deep zoom is off" in doc.by_id("viewer-missing").text
    assert not [s for s in doc.all("script") if s.attrs.get("src", "").startswith("/viewer/")]
    assert doc.one("div", cls="plain")
    missing = await client.get("/viewer/openseadragon.min.js")
    assert missing.status == 404 and "install-openseadragon.py" in str((await missing.json())["recovery"])


async def test_asset_routes_serve_only_their_own_files(client: TestClient) -> None:
    for path in (
        "/static/../../settings.py",
        "/static/%2e%2e/%2e%2e/settings.py",
        "/static/..%2f..%2fsettings.py",
        "/viewer/../../package.json",
        "/viewer/%2e%2e/%2e%2e/%2e%2e/package.json",
        "/static/templates/base.html",
    ):
        resp = await client.get(path)
        assert resp.status == 404, path
