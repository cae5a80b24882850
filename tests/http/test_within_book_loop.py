"""A guard, not a benchmark: a phrase search inside a long book keeps the event loop answering.

A phrase is checked in every text that holds its words (each text read and folded), which in a long book with
common words is seconds of work; a hostile caller may ask for it again and again. Before that work moved to a worker
thread, the loop stood still for the whole search.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from imagesvc.catalog import Catalog
from imagesvc.catalog.page_text import index_page
from tests.http.conftest import MakeClient
from tests.search.test_loop_lag import MAX_LAG, SHARE, Watchdog

PAGES = 1500
TEXT = "Der König sprach zu seinem Volke über das Gold und die Öfen der Alchemisten. " * 25


@pytest.mark.guard
async def test_the_loop_answers_while_a_long_book_is_searched_for_a_phrase(
    make_client: MakeClient, data_dir: Path
) -> None:
    catalog = Catalog(data_dir / "catalog.sqlite3")
    book = catalog.query_one("SELECT id FROM books ORDER BY id LIMIT 1")["id"]
    with catalog.transaction() as conn:
        for number in range(1000, 1000 + PAGES):
            page = {"ocr": TEXT, "translation": TEXT}
            conn.execute(
                "INSERT INTO pages (id, book_id, number, ocr, translation) VALUES (?, ?, ?, ?, ?)",
                (f"{book}-{number}", book, number, TEXT, TEXT),
            )
            index_page(conn, book, number, page)
    catalog.close()
    client = await make_client()
    with Watchdog() as watchdog:
        start = time.perf_counter()
        search = asyncio.ensure_future(client.get(f"/api/books/{book}/search", params={"q": '"der konig"'}))
        while not search.done():  # the loop also answers requests meanwhile
            assert (await client.get("/api/rate_limit")).status == 200
        response = await search
        took = time.perf_counter() - start
    body = await response.json()
    assert response.status == 200 and body["total"] == PAGES, body
    bound = max(MAX_LAG, SHARE * took)
    assert watchdog.worst < bound, f"the event loop stood still for {watchdog.worst * 1000:.0f} ms of {took:.2f} s"
