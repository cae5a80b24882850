"""The gallery pages over HTTP: the site root is a search page whose form and URL are the /api/gallery query, its
results are the tool's results, and every picture comes from the image host with its description as alt text."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
from aiohttp.test_utils import TestClient
from PIL import Image, ImageOps

from tests.library import SITE, settings_for
from tests.pages.conftest import MakeClient
from tests.pages.markup import parse
from tests.search.conftest import TINY, index_library

HTML = {"Accept": "text/html,application/xhtml+xml"}
FILTER_NAMES = ["q", "type", "subject", "figure", "symbol", "year_from", "year_to", "book", "collection"]


def card_ids(html: str) -> list[str]:
    return [e.attrs["id"].removeprefix("ill-") for e in parse(html).all("li", cls="card")]


async def test_the_site_root_is_a_search_page_not_a_json_404(client: TestClient) -> None:
    resp = await client.get("/", headers=HTML)
    assert resp.status == 200
    assert resp.content_type == "text/html"
    doc = parse(await resp.text())
    form = doc.one("form", role="search")
    assert form.attrs["method"] == "get"
    # The form's fields are the filters of search_images, under the names GET /api/gallery takes.
    names = [e.attrs["name"] for e in doc.all() if e.tag in ("input", "select") and e.attrs.get("name")]
    # the last: the search-by-image form's fields, the search_images_by_image arguments
    assert names == [*FILTER_NAMES, "image", "book_id", "limit"]
    for name in FILTER_NAMES:  # each has a visible label
        doc.one("label", for_=f"f-{name}")
    assert doc.one("input", name="year_from").attrs["type"] == "number"
    assert doc.one("input", name="q").attrs["dir"] == "auto"  # Hebrew and Arabic typed right to left
    options = [o.attrs["value"] for o in doc.all("option") if o.attrs["value"]]
    assert "demo-sefer-maarekhet-ha-kokhavim" in options and "demo-heavens" in options  # a book, a collection


async def test_results_are_the_gallery_tools_results_in_order(client: TestClient) -> None:
    query = {"q": "furnace", "maxPerBook": "10"}
    page = await client.get("/", params=query, headers=HTML)
    api = await (await client.get("/api/gallery", params=query)).json()
    html = await page.text()
    assert api["items"], "the demo library has furnaces"
    assert card_ids(html) == [item["id"] for item in api["items"]]
    assert not parse(html).all("data")  # raw scores are for the API, not for readers
    assert f"1–{len(api['items'])} of {api['total']} pictures" in parse(html).one("p", cls="count").text


async def test_the_url_holds_the_whole_query_and_pages_through(client: TestClient) -> None:
    query = {"book": "demo-sefer-maarekhet-ha-kokhavim", "year_from": "1500", "maxPerBook": "10", "limit": "2"}
    doc = parse(await (await client.get("/", params=query, headers=HTML)).text())
    assert doc.one("input", name="q").attrs["value"] == ""
    assert doc.one("input", name="year_from").attrs["value"] == "1500"
    (selected,) = [o for o in doc.all("option") if "selected" in o.attrs]
    assert selected.attrs["value"] == "demo-sefer-maarekhet-ha-kokhavim"
    following = doc.one("a", rel="next").attrs["href"]
    assert parse_qs(urlsplit(following).query) == {**{k: [v] for k, v in query.items()}, "offset": ["2"]}
    second = await client.get(following, headers=HTML)
    api = await (await client.get("/api/gallery", params={**query, "offset": "2"})).json()
    assert card_ids(await second.text()) == [item["id"] for item in api["items"]]
    assert parse(await second.text()).one("a", rel="prev")


async def test_pictures_come_from_the_image_host_with_descriptions_as_alt_text(client: TestClient) -> None:
    api = await (await client.get("/api/gallery", params={"maxPerBook": "1000", "limit": "50"})).json()
    doc = parse(await (await client.get("/", params={"maxPerBook": "1000", "limit": "50"}, headers=HTML)).text())
    images = doc.all("img")
    assert len(images) == len(api["items"]) > 20
    for img, item in zip(images, api["items"], strict=True):
        assert img.attrs["src"] == item["image_thumb"]
        assert img.attrs["src"].startswith(f"{SITE}/img/")  # the public, marked tier
        assert img.attrs["alt"] == item["description"]
    # Each result opens the page it is printed on, at its citation URL.
    hrefs = [a.attrs["href"] for a in doc.all("a", cls="thumb")]
    assert hrefs == [item["citation_url"].removeprefix(SITE) for item in api["items"]]


async def test_a_query_read_through_a_dictionary_says_how_it_was_read(client: TestClient) -> None:
    """A Latin query is also read through its dictionary: the page says so, in the gloss's words; an English one
    says nothing of the kind."""
    from imagesvc.search import glosses
    from tests.parts import missing_part

    if not glosses.available()["la"]:
        missing_part("the text extra's Latin lexicon is not installed (pip install .[text])")
    api = await (await client.get("/api/gallery", params={"q": "draco caudam suam devorans"})).json()
    read = api["search"]["glossed"]
    assert read["language"] == "la" and "dragon" in read["gloss"]
    doc = parse(await (await client.get("/", params={"q": "draco caudam suam devorans"}, headers=HTML)).text())
    notice = doc.one("p", cls="reading")
    assert "Latin dictionary" in notice.text and read["gloss"] in notice.text
    doc = parse(await (await client.get("/", params={"q": "snake eating itself"}, headers=HTML)).text())
    assert not doc.all("p", cls="reading")


async def test_a_hostile_query_is_shown_as_text(client: TestClient) -> None:
    hostile = '"><script>alert(1)</script><img src=x onerror=alert(2)>'
    resp = await client.get("/", params={"q": hostile}, headers=HTML)
    html = await resp.text()
    assert resp.status == 200
    assert "<script>alert" not in html and "<img src=x" not in html
    assert parse(html).one("input", name="q").attrs["value"] == hostile
    assert "script-src 'self'" in resp.headers["Content-Security-Policy"]


async def test_a_bad_filter_is_a_page_that_says_which(client: TestClient) -> None:
    resp = await client.get("/", params={"year_from": "soon"}, headers=HTML)
    assert resp.status == 400
    assert resp.content_type == "text/html"
    assert "year_from" in parse(await resp.text()).one("p", cls="message").text
    api = await client.get("/api/gallery", params={"year_from": "soon"})
    assert api.status == 400 and (await api.json())["error"] == "invalid_request"  # the API keeps its JSON


async def test_collections_show_their_covers_counts_and_items(client: TestClient) -> None:
    api = await (await client.get("/api/gallery/collections")).json()
    doc = parse(await (await client.get("/collections", headers=HTML)).text())
    covers = [img.attrs["src"] for img in doc.all("img")]
    assert covers == [c["cover_image"] for c in api["items"]]
    for c in api["items"]:
        link = doc.all("a", href=f"/collections/{c['slug']}")
        assert link and any(c["title"] == a.text for a in link)
        one = await client.get(f"/collections/{c['slug']}", headers=HTML)
        items = (await (await client.get(f"/api/gallery/collections/{c['slug']}")).json())["items"]
        assert card_ids(await one.text()) == [i["id"] for i in items]
        assert f"{c['imageCount']} picture" in await one.text()
    missing = await client.get("/collections/no-such-set", headers=HTML)
    assert missing.status == 404 and missing.content_type == "text/html"


async def test_an_illustration_page_describes_it_and_links_its_page(client: TestClient) -> None:
    items = (await (await client.get("/api/gallery", params={"q": "furnace"})).json())["items"]
    item = await (await client.get(f"/api/gallery/images/{items[0]['id']}")).json()
    doc = parse(await (await client.get(f"/illustration/{item['id']}", headers=HTML)).text())
    assert doc.one("h1").text == item["description"]
    assert doc.one("p", cls="museum").text == item["museum_description"]
    img = doc.one("img")
    assert img.attrs["src"] == item["image_display"] and img.attrs["alt"] == item["description"]
    assert doc.all("a", href=item["citation_url"].removeprefix(SITE))
    unknown = await client.get("/illustration/nope:0", headers=HTML)
    assert unknown.status == 404 and unknown.content_type == "text/html"


async def test_more_like_this_appears_only_when_clip_can_rank(make_client: MakeClient, data_dir: Path) -> None:
    plain = await make_client()
    doc = parse(await (await plain.get("/", params={"q": "furnace"}, headers=HTML)).text())
    assert not [a for a in doc.all("a") if a.text == "More like this"]  # full text only: no link that would fail
    await index_library(settings_for(data_dir, **TINY))
    clip = await make_client(**TINY)
    doc = parse(await (await clip.get("/", params={"q": "furnace"}, headers=HTML)).text())
    likes = [a.attrs["href"] for a in doc.all("a") if a.text == "More like this"]
    assert len(likes) == len(doc.all("li", cls="card")) > 0
    first = card_ids(await (await clip.get(likes[0], headers=HTML)).text())
    api = await (await clip.get("/api/gallery", params={"like": first[0]})).json()
    assert first == [i["id"] for i in api["items"]] and first[0] == likes[0].split("=", 1)[1]
    entry = parse(await (await clip.get(f"/illustration/{first[0]}", headers=HTML)).text())
    assert entry.one("h2", id="similar") and entry.all("li", cls="card")


async def test_search_by_image_from_the_page_finds_every_printing_of_a_woodcut(
    make_client: MakeClient, demo_library: dict[str, Any]
) -> None:
    """A person picks a crop of a woodcut in the page's file field and gets, as cards, every book that prints it."""
    root = Path(demo_library["manifest"]).parent
    expected = json.loads((root / "demo-expected.json").read_text(encoding="utf-8"))
    pages = {(p["book"], p["page"]): p["image"] for p in expected["pages"]}
    printings = [i for i in expected["illustrations"] if i.get("block")]
    first = printings[0]
    x0, y0, x1, y1 = first["box"]
    w, h = x1 - x0, y1 - y0
    page = ImageOps.exif_transpose(Image.open(root / pages[(first["book"], first["page"])])).convert("RGB")
    buffer = io.BytesIO()
    page.crop((x0 + w // 5, y0 + h // 5, x1 - w // 5, y1 - h // 5)).save(buffer, "JPEG", quality=85)
    client = await make_client(search_wait=600)
    home = parse(await (await client.get("/", headers=HTML)).text())
    upload = home.one("form", action="/search-by-image")
    assert upload.attrs["method"] == "post" and upload.attrs["enctype"] == "multipart/form-data"
    form = aiohttp.FormData()
    form.add_field("image", buffer.getvalue(), filename="crop.jpg", content_type="image/jpeg")
    resp = await client.post("/search-by-image", data=form, headers=HTML)
    assert resp.status == 200 and resp.content_type == "text/html"
    doc = parse(await resp.text())
    shown = {c.text for c in doc.all("cite")}
    titles = {b["title"] for b in json.loads((root / "manifest.json").read_text())["books"]}
    wanted = {
        b["title"]
        for b in json.loads((root / "manifest.json").read_text())["books"]
        if b["slug"] in {p["book"] for p in printings}
    }
    assert shown == wanted and len(wanted) == 3 and shown <= titles
    empty = await client.post("/search-by-image", data=aiohttp.FormData({"other": "x"}), headers=HTML)
    assert empty.status == 400 and empty.content_type == "text/html"  # told in a page, not a JSON error


async def test_a_book_filter_shows_the_whole_book_and_the_cap_says_so(client: TestClient) -> None:
    book = "demo-speculum-fornacum"
    listed = await (await client.get("/api/gallery", params={"book": book, "maxPerBook": "1000"})).json()
    html = await (await client.get("/", params={"book": book}, headers=HTML)).text()
    doc = parse(html)
    assert len(card_ids(html)) == min(listed["total"], 20)  # not 3: every picture of the book, a page at a time
    assert f"of {listed['total']} pictures" in doc.one("p", cls="count").text
    assert doc.one("details", cls="more-filters").attrs.get("open") is not None  # a filter is set: shown
    everything = parse(await (await client.get("/", headers=HTML)).text())
    note = everything.one("p", cls="count")
    assert "At most 3 from each book" in note.text
    link = next(a for a in everything.all("a") if a.text == "show every picture")
    full = parse(await (await client.get(link.attrs["href"], headers=HTML)).text())
    api_all = await (await client.get("/api/gallery", params={"maxPerBook": "1000"})).json()
    assert f"of {api_all['total']} pictures" in full.one("p", cls="count").text
    assert everything.one("details", cls="more-filters").attrs.get("open") is None  # no filter: folded away
