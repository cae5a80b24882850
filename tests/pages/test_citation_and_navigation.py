"""What a reader's tools find on a reading page: Highwire citation tags a reference manager captures (the book's
title, author, date, language, holder, the page and its citation URL), a go-to-page form that lands on that page,
and a srcset so a phone fetches the tier it needs."""

from __future__ import annotations

from aiohttp.test_utils import TestClient

from tests.pages.markup import parse

HTML = {"Accept": "text/html"}
BOOK = "demo-speculum-fornacum"


async def test_a_reading_page_carries_the_citation_a_reference_manager_reads(client: TestClient) -> None:
    book = await (await client.get(f"/api/books/{BOOK}")).json()
    doc = parse(await (await client.get(f"/book/{BOOK}?page=3", headers=HTML)).text())
    meta: dict[str, list[str]] = {}
    for m in doc.all("meta"):
        if m.attrs.get("name", "").startswith("citation_"):
            meta.setdefault(m.attrs["name"], []).append(m.attrs["content"])
    page = next(p for p in book["pages"] if p["page"] == 3)
    assert meta["citation_title"] == [book["title"]]
    assert meta["citation_author"] == [book["author"]]
    assert meta["citation_publication_date"] == [str(book["year"])]
    assert meta["citation_language"] == [book["language"]]
    assert meta["citation_firstpage"] == ["3"]
    assert meta["citation_public_url"] == [page["citation_url"]]
    assert meta["citation_publisher"] == [book["attribution"]["institution"]]
    about = parse(await (await client.get(f"/book/{BOOK}", headers=HTML)).text())  # the book page: the book alone
    names = {m.attrs.get("name") for m in about.all("meta")}
    assert "citation_title" in names and "citation_firstpage" not in names


async def test_go_to_page_lands_on_the_page_asked_for(client: TestClient) -> None:
    doc = parse(await (await client.get(f"/book/{BOOK}", headers=HTML)).text())
    form = doc.one("form", cls="go-to-page")
    field = next(i for i in doc.all("input") if i.attrs.get("id") == "go-to-page")
    assert field.attrs["name"] == "page" and int(field.attrs["max"]) == 8
    landed = await client.get(form.attrs["action"], params={"page": "5"}, headers=HTML)
    assert landed.status == 200
    assert parse(await landed.text()).one("h1").text.endswith("p. 5")
    beyond = await client.get(form.attrs["action"], params={"page": "99"}, headers=HTML)
    assert beyond.status == 404 and "first page" in (await beyond.text()).lower()


async def test_the_page_image_offers_each_tier_by_width(client: TestClient) -> None:
    book = await (await client.get(f"/api/books/{BOOK}")).json()
    page = next(p for p in book["pages"] if p["page"] == 2)
    doc = parse(await (await client.get(f"/book/{BOOK}?page=2", headers=HTML)).text())
    img = next(i for i in doc.all("img") if "srcset" in i.attrs)
    candidates = dict(reversed(c.strip().split()) for c in img.attrs["srcset"].split(","))
    assert candidates[f"{page['sizes']['thumb']['width']}w"] == page["image_thumb"]
    assert candidates[f"{page['sizes']['display']['width']}w"] == page["image_display"]
    assert img.attrs["sizes"]
