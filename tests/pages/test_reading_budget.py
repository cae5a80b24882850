"""A person reads in a browser within the daily budgets: pages for people are paced by page views, not held to the
API's request limit; a reading page offers the next class before the text runs out and on the wall, with links
that work; scripts on the API stay limited as the spec says. The access store's clock is the test's, so that hours
of reading take seconds (the store is the real one)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from aiohttp.test_utils import TestClient

from imagesvc.access import sqlite as access_sqlite
from imagesvc.access.policy import PAGE_VIEWS, caller_class
from tests.http.conftest import MakeClient
from tests.pages.markup import parse

HTML = {"Accept": "text/html"}
BOOK = "demo-speculum-fornacum"
PAGES = 8  # its pages
SIGN_IN = "https://library.example/sign-in"
KEYS = "https://library.example/developers"


class Clock:
    """The access store's wall clock: starts now, moves only when told."""

    def __init__(self) -> None:
        self.now = time.time()

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    made = Clock()
    monkeypatch.setattr(access_sqlite, "time", SimpleNamespace(time=made.time, sleep=time.sleep))
    yield made


@pytest.fixture
async def reader(make_client: MakeClient, clock: Clock) -> TestClient:
    return await make_client(sign_in_url=SIGN_IN, keys_url=KEYS)


@pytest.mark.slow
async def test_an_anonymous_reader_reads_the_daily_budget_and_is_offered_more_before_the_wall(
    reader: TestClient, clock: Clock
) -> None:
    text_budget = caller_class("anonymous").text_per_day
    assert text_budget == 500
    offered_from = None
    for n in range(text_budget):  # a page every 5 s: 500 pages in 42 minutes, past the API's 60 an hour
        clock.now += 5
        response = await reader.get(f"/book/{BOOK}?page={n % PAGES + 1}", headers=HTML)
        assert response.status == 200, (n, await response.text())
        doc = parse(await response.text())
        assert doc.all("div", cls="body"), f"page view {n + 1} shows no text"
        if doc.all("div", cls="offers") and offered_from is None:
            offered_from = n + 1
    assert offered_from is not None and 400 <= offered_from <= 451, offered_from  # offered with 50 pages left
    clock.now += 5
    wall = await reader.get(f"/book/{BOOK}?page=1", headers=HTML)
    assert wall.status == 429 and "Retry-After" in wall.headers
    doc = parse(await wall.text())
    assert not doc.all("div", cls="body")  # no text past the budget, the image and the page stay
    assert "sign in" in doc.one("div", cls="offers").text.lower()
    assert {SIGN_IN, KEYS} <= {a.attrs.get("href") for a in doc.all("a")}  # each next class, linked
    for a in doc.all("a"):  # every link of the page on the site opens a page, not an error (a reading page
        href = a.attrs.get("href", "")  # past the budget shows its image and these offers again)
        if href.startswith("/") and not href.startswith(("/img/", "/iiif/")):
            clock.now += 2
            followed = await reader.get(href, headers=HTML)
            assert followed.status in (200, 429), href
            if "text/html" in followed.headers["Content-Type"]:
                assert not parse(await followed.text()).all("section", cls="error"), href
    api = await reader.get("/api/books")  # the API's request limit was never spent by reading
    assert '"requests";r=59' in api.headers["RateLimit"], api.headers["RateLimit"]


async def test_page_views_are_paced_apart_from_api_requests(reader: TestClient, clock: Clock) -> None:
    for n in range(PAGE_VIEWS):
        response = await reader.get(f"/book/{BOOK}", headers=HTML)
        assert response.status == 200, n
        assert f'"page_views";q={PAGE_VIEWS};w=60' in response.headers["RateLimit-Policy"]
    paced = await reader.get(f"/book/{BOOK}", headers=HTML)
    assert paced.status == 429 and int(paced.headers["Retry-After"]) <= 60
    assert "text/html" in paced.headers["Content-Type"]
    api = await reader.get("/api/books")
    assert api.status == 200 and '"requests";r=59' in api.headers["RateLimit"]
    clock.now += 61  # a minute on: reading goes on
    assert (await reader.get(f"/book/{BOOK}", headers=HTML)).status == 200


async def test_the_api_keeps_the_specs_request_limit(reader: TestClient, clock: Clock) -> None:
    for n in range(60):
        assert (await reader.get("/api/books")).status == 200, n
    refused = await reader.get("/api/books")
    assert refused.status == 429 and (await refused.json())["pool"] == "requests"
    assert (await reader.get(f"/book/{BOOK}", headers=HTML)).status == 200  # a person's pages still open
