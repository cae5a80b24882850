"""``/catalogue``: a person browses the books, narrows them by what the facets offer (each choice gives the count it
shows), and pages by the next link to the end without losing or repeating a book."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import TestClient

from imagesvc.pages import catalogue as catalogue_page
from tests.pages.markup import parse

HTML = {"Accept": "text/html"}


async def test_every_facet_choice_gives_the_books_it_counts(client: TestClient) -> None:
    page = await client.get("/catalogue", headers=HTML)
    assert page.status == 200
    doc = parse(await page.text())
    assert len(doc.all("li", cls="book-row")) == 4  # the demo library
    counts = {}  # each facet entry reads "<label> <count>": the label is its link's text
    entries = [li.text for li in doc.all("li") if li.text and li.text.split()[-1].isdigit()]
    for a in doc.all("a"):
        href = a.attrs.get("href", "")
        if href.startswith("/catalogue?") and "cursor" not in href:
            (entry,) = [e for e in entries if e.startswith(a.text + " ")]
            counts[href] = int(entry.split()[-1])
    assert len(counts) >= 6, counts  # languages, centuries, libraries, illustrated
    for href, count in counts.items():
        narrowed = await client.get(href, headers=HTML)
        assert narrowed.status == 200, href
        assert len(parse(await narrowed.text()).all("li", cls="book-row")) == count, href


async def test_next_links_walk_every_book_once(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalogue_page, "PER_PAGE", 1)
    seen: list[str] = []
    href: str | None = "/catalogue"
    while href is not None:
        doc = parse(await (await client.get(href, headers=HTML)).text())
        seen += [li.text for li in doc.all("li", cls="book-row")]
        nxt = [a for a in doc.all("a") if a.attrs.get("rel") == "next"]
        href = nxt[0].attrs["href"] if nxt else None
        assert len(seen) <= 4
    assert len(seen) == 4 and len(set(seen)) == 4


async def test_a_forged_cursor_is_an_html_400(client: TestClient) -> None:
    page = await client.get("/catalogue?cursor=not-a-book", headers=HTML)
    assert page.status == 400 and "text/html" in page.headers["Content-Type"]
    assert "cursor" in await page.text()
