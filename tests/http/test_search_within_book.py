"""Search inside a book over HTTP on the demo library: hits, snippets and citations, the text budget, the page form,
hostile queries. (The same call on every door is in tests/conformance.)"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from colophon import detect
from imagesvc.web.app_keys import SERVICES
from tests.http.test_quotes import ANONYMOUS, SPECULUM, _key, _spend
from tests.library import SITE

HEBREW = "demo-sefer-maarekhet-ha-kokhavim"


async def _search(client: TestClient, book: str, **params: str) -> tuple[int, dict[str, Any]]:
    resp = await client.get(f"/api/books/{book}/search", params=params)
    return resp.status, await resp.json()


async def test_hits_are_pages_with_snippets_citations_and_a_cost_of_one_unit_each(client: TestClient) -> None:
    status, body = await _search(client, SPECULUM, q="furnace")
    assert status == 200
    assert [hit["page"] for hit in body["hits"]] == [2]  # "furnaces" on page 1 is another word
    hit = body["hits"][0]
    assert hit["citation_url"] == f"{SITE}/book/{SPECULUM}?page=2"
    (cut,) = hit["snippets"]
    assert cut["field"] == "translation"
    assert [cut["text"][a:b] for a, b in cut["highlights"]] == ["furnace", "furnace"]
    assert (body["total"], body["pages_served"], body["truncated"]) == (1, 1, False)
    limits = await (await client.get("/api/rate_limit")).json()
    assert limits["pools"]["text"]["used"] == 1

    status, body = await _search(client, SPECULUM, q="unicorn")
    assert (status, body["hits"], body["total"]) == (200, [], 0)
    limits = await (await client.get("/api/rate_limit")).json()
    assert limits["pools"]["text"]["used"] == 2  # nothing found: the search's own unit, as one page found costs


async def test_the_long_s_of_the_ocr_and_the_field_filter(client: TestClient) -> None:
    status, body = await _search(client, SPECULUM, q="vasis", field="ocr")  # printed "vaſis"
    assert status == 200 and [h["page"] for h in body["hits"]] == [3]
    (cut,) = body["hits"][0]["snippets"]
    assert [cut["text"][a:b] for a, b in cut["highlights"]] == ["vaſis"]
    status, body = await _search(client, SPECULUM, q="vasis", field="translation")
    assert (status, body["hits"]) == (200, [])


async def test_hebrew_ranked_best_first(client: TestClient) -> None:
    status, body = await _search(client, HEBREW, q="הכוכבים")
    assert status == 200
    assert sorted(h["page"] for h in body["hits"]) == [1, 5, 6]
    scores = [h["score"] for h in body["hits"]]
    assert scores == sorted(scores, reverse=True)
    status, body = await _search(client, HEBREW, q='"השמש סובבת"')
    assert [h["page"] for h in body["hits"]] == [2]


async def test_a_budget_cut_serves_the_best_pages_that_fit(client: TestClient) -> None:
    await _spend(client, ANONYMOUS, "text", 499, 500)
    resp = await client.get(f"/api/books/{HEBREW}/search", params={"q": "הכוכבים"})
    body = await resp.json()
    assert resp.status == 200
    assert len(body["hits"]) == 1 and body["total"] == 3
    assert (body["truncated"], body["truncated_reason"]) == (True, "budget")
    assert resp.headers["X-Pages-Truncated"].startswith("requested=3; served=1; reason=budget")
    denied = await client.get(f"/api/books/{HEBREW}/search", params={"q": "הכוכבים"})
    assert denied.status == 429 and (await denied.json())["pool"] == "text"


async def test_snippets_served_to_a_key_carry_a_colophon(client: TestClient) -> None:
    key, _ = _key(_data_dir(client))
    resp = await client.get(f"/api/books/{SPECULUM}/search", params={"q": "furnace"},
                            headers={"Authorization": f"Bearer {key}"})  # fmt: skip
    body = await resp.json()
    assert body["colophon"] is True
    assert detect(body["hits"][0]["snippets"][0]["text"]) == "sealed"


def _data_dir(client: TestClient) -> Path:
    return Path(client.server.app[SERVICES].settings.data_dir)


@pytest.mark.parametrize(
    ("q", "status", "code"),
    [
        ("", 400, "invalid_request"),
        ('"*"', 400, "invalid_request"),
        ("()^:", 400, "invalid_request"),
        ("x" * 501, 400, "invalid_request"),
        (" ".join(["gold"] * 33), 400, "invalid_request"),
        ('"', 400, "invalid_request"),
        ("NEAR(furnace", 200, None),
        ("furnace*", 200, None),
        ("translation: furnace", 200, None),
        ("furnace OR vessel", 200, None),
        ("furnace'; DROP TABLE pages; --", 200, None),
    ],
)
async def test_hostile_queries_are_text_or_a_clear_400(client: TestClient, q: str, status: int, code: Any) -> None:
    got, body = await _search(client, SPECULUM, q=q)
    assert got == status, body
    if code:
        assert body["error"] == code and body["message"] and body["recovery"]
    else:
        assert all(h["page"] in range(1, 9) for h in body["hits"])
    assert (await client.get(f"/api/books/{SPECULUM}")).status == 200  # the catalog is untouched


async def test_unknown_book_is_not_found(client: TestClient) -> None:
    status, body = await _search(client, "no-such-book", q="furnace")
    assert (status, body["error"]) == (404, "not_found")


async def test_the_book_pages_search_form(client: TestClient) -> None:
    page = await (await client.get(f"/book/{SPECULUM}?page=2")).text()
    assert 'name="q"' in page and f'action="/book/{SPECULUM}"' in page
    resp = await client.get(f"/book/{SPECULUM}", params={"q": "furnace"})
    html = await resp.text()
    assert resp.status == 200
    assert f'href="{SITE}/book/{SPECULUM}?page=2"' in html
    assert re.findall(r"<mark>(.*?)</mark>", html) == ["furnace", "furnace"]
    limits = await (await client.get("/api/rate_limit")).json()
    assert limits["pools"]["text"]["used"] == 2  # the reading page, then one hit: metered as the API door is
    nothing = await (await client.get(f"/book/{SPECULUM}", params={"q": "<script>unicorn"})).text()
    assert "<script>unicorn" not in nothing and "No page matches" in nothing


async def test_korean_hits_show_the_words_they_were_charged_for(client: TestClient) -> None:
    """Hangul syllables are one of the scripts written without spaces that the index spells a character a token: a
    page found by a Korean query is served, and charged one text unit, with a snippet marking the word, never as a
    bare page number that cost a unit and showed no text."""
    from imagesvc.catalog import Catalog
    from tests.catalog.test_page_search import write_book

    catalog = Catalog(_data_dir(client) / "catalog.sqlite3")
    try:
        write_book(
            catalog, "k0rea", {1: ("대한민국의 연금술 서적", "A Korean book of alchemy", None), 2: ("없음", None, None)}
        )
    finally:
        catalog.close()
    for query, word in (("연금술", "연금술"), ("한민", "한민"), ('"연금술 서적"', "연금술 서적")):
        status, body = await _search(client, "k0rea", q=query)
        assert status == 200, body
        assert [hit["page"] for hit in body["hits"]] == [1], query
        (cut,) = body["hits"][0]["snippets"]
        assert cut["field"] == "ocr"
        assert word in [cut["text"][a:b] for a, b in cut["highlights"]], query
    limits = await (await client.get("/api/rate_limit")).json()
    assert limits["pools"]["text"]["used"] == 3  # one page served each time


async def test_a_long_quoted_passage_is_shown_in_the_snippet_it_was_charged_for(client: TestClient) -> None:
    """Pasting a sentence from a page in quotes is how a reader checks a quotation: the page is found, charged one
    unit, and its snippet shows the passage highlighted, however far down the page it stands."""
    from imagesvc.catalog import Catalog
    from tests.catalog.test_page_search import write_book

    passage = (
        "the philosophers of the furnace gathered their vessels of glass and of clay, and they set the athanor upon "
        "the hearth so that the fire might burn gently through the long nights of the work"
    )
    text = "Of the furnaces and their uses, as the masters wrote them down. " * 3 + passage + ", as was taught."
    catalog = Catalog(_data_dir(client) / "catalog.sqlite3")
    try:
        write_book(catalog, "l0ng", {1: (None, text, None), 2: (None, "Nothing of the sort.", None)})
    finally:
        catalog.close()
    status, body = await _search(client, "l0ng", q=f'"{passage}"')
    assert status == 200 and [hit["page"] for hit in body["hits"]] == [1], body
    (cut,) = body["hits"][0]["snippets"]
    assert [cut["text"][a:b] for a, b in cut["highlights"]] == [passage]
    assert body["pages_served"] == 1
