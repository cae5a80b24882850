"""search_within_book is priced and bounded per caller, on a pool of its own, at every door.

The attacks: 12 anonymous searches at once from one address (each seconds of CPU then) pushed ``/health`` to a 30 s
timeout, since they ran on the default executor that ``/health`` and the local store's reads use and nothing bounded
them; and a search that found nothing was free, so a phrase of common words that no page holds cost CPU and no
budget.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient

from imagesvc.access import MILLI
from imagesvc.access.identity import sign_session
from imagesvc.catalog import Catalog
from imagesvc.catalog.page_text import index_page
from imagesvc.catalog.text_fold import query_words
from imagesvc.web.app_keys import ACCESS, SERVICES
from tests.http.conftest import MakeClient
from tests.http.test_doors import SLUG, _find_img
from tests.http.test_within_book_loop import TEXT

HANG = 60  # seconds: a bound only a hang reaches
NOTHING = '"furnace furnace furnace"'  # common in the book, never three times in a row


def _session(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {sign_session(user, int(time.time()) + 3600, 'test-secret')}"}


async def _text_used(client: TestClient, headers: dict[str, str]) -> int:
    quota = await (await client.get("/api/rate_limit", headers=headers)).json()
    return int(quota["pools"]["text"]["used"])


async def test_a_flood_from_one_caller_is_refused_past_its_bound_while_health_and_the_store_answer(
    make_client: MakeClient,
) -> None:
    from imagesvc.tools.page_search_work import page_search_work

    client = await make_client(within_book_threads=1, within_book_per_caller=2)
    work = page_search_work(client.server.app[SERVICES])
    img = _find_img(await (await client.get(f"/api/books/{SLUG}")).json())
    # The search pool's one thread is held, so every admitted search waits: what a flood of slow searches does.
    started, release = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        release.wait(HANG)

    holder = asyncio.get_running_loop().run_in_executor(work.pool, hold)
    try:
        assert await asyncio.to_thread(started.wait, HANG)
        url = f"/api/books/{SLUG}/search"
        flood = [asyncio.ensure_future(client.get(url, params={"q": '"fornacum"'})) for _ in range(12)]
        other = asyncio.ensure_future(client.get(url, params={"q": "furnace"}, headers=_session("another")))
        refused: list[Any] = []
        while len(refused) < 10:
            done, _ = await asyncio.wait(
                [f for f in flood if f not in refused], timeout=HANG, return_when="FIRST_COMPLETED"
            )
            assert done, "the searches past the caller's bound were not refused"
            refused += done
        for response in (f.result() for f in refused):
            assert response.status == 429 and int(response.headers["Retry-After"]) > 0
            body = await response.json()
            assert (body["error"], body["limit"]) == ("rate_limited", "within_book_concurrency"), body
            assert body["message"] and body["recovery"]
        admitted = [f for f in flood if f not in refused]
        assert len(admitted) == 2 and not any(f.done() for f in admitted) and not other.done()
        # The loop, the default executor and the store still answer while searches fill the search pool.
        health = await asyncio.wait_for(client.get("/health"), HANG)
        assert health.status == 200
        image = await asyncio.wait_for(client.get(f"/img/{img}"), HANG)
        assert image.status == 200 and len(await image.read()) > 0
    finally:
        release.set()
        await holder
    for response in await asyncio.gather(*admitted, other):
        assert response.status == 200, await response.text()  # another caller was admitted meanwhile
    assert work.state() == {"held": 0, "callers": 0}


async def test_a_search_that_finds_nothing_costs_what_a_search_finding_one_page_costs(client: TestClient) -> None:
    headers = _session(f"nothing-{time.time_ns()}")
    empty = await client.get(f"/api/books/{SLUG}/search", params={"q": NOTHING}, headers=headers)
    body = await empty.json()
    assert empty.status == 200 and body["total"] == 0 and body["pages_served"] == 0, body
    assert await _text_used(client, headers) == 1
    found = await client.get(f"/api/books/{SLUG}/search", params={"q": "the", "limit": 3}, headers=headers)
    assert (await found.json())["pages_served"] == 3
    assert await _text_used(client, headers) == 1 + 3  # a page served costs one unit, as before


async def test_with_the_text_pool_spent_no_door_starts_a_search(client: TestClient) -> None:
    """A search that would find nothing is refused like one that finds something, before any work, at the REST
    route, the MCP tool and the book's page."""
    user = f"spent-{time.time_ns()}"
    headers = _session(user)
    held = await client.server.app[ACCESS].reserve(f"user:{user}", "text", 1000 * MILLI, 1000 * MILLI)
    assert await client.server.app[ACCESS].commit(held)
    rest = await client.get(f"/api/books/{SLUG}/search", params={"q": NOTHING}, headers=headers)
    assert rest.status == 429 and int(rest.headers["Retry-After"]) > 0
    assert (await rest.json())["pool"] == "text"
    call = {"name": "search_within_book", "arguments": {"book_id": SLUG, "q": NOTHING}}
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}
    mcp = await client.post("/api/mcp", json=message, headers={**headers, "Accept": "application/json"})
    result = (await mcp.json())["result"]
    assert result["isError"] is True and result["structuredContent"]["error"] == "rate_limited", result
    page = await client.get(f"/book/{SLUG}", params={"q": NOTHING}, headers=headers)
    assert page.status == 429 and page.content_type == "text/html"


async def test_a_query_past_the_work_budget_is_refused_before_its_texts_are_read_and_costs_nothing(
    make_client: MakeClient, data_dir: Path
) -> None:
    """32 distinct phrases of common words, each on every one of 2,000 pages: seconds of CPU before, now a 400
    naming ``q`` once the index has said how many texts the phrases would need checking in."""
    catalog = Catalog(data_dir / "catalog.sqlite3")
    book = catalog.query_one("SELECT id FROM books ORDER BY id LIMIT 1")["id"]
    with catalog.transaction() as conn:
        for number in range(1000, 3000):
            conn.execute(
                "INSERT INTO pages (id, book_id, number, ocr, translation) VALUES (?, ?, ?, ?, ?)",
                (f"{book}-{number}", book, number, TEXT, TEXT),
            )
            index_page(conn, book, number, {"ocr": TEXT, "translation": TEXT})
    catalog.close()
    tokens = query_words(f'"{TEXT.split(".")[0]}"')[0].tokens  # der konig sprach zu ... der alchemisten
    phrases = ["-".join(tokens[i : i + n]) for n in (2, 3, 4) for i in range(len(tokens) - n + 1)]
    q = " ".join(phrases[:32])  # as many distinct phrases as a query may hold
    assert len(q) <= 500 and len(set(query_words(q))) == 32
    client = await make_client()
    response = await client.get(f"/api/books/{book}/search", params={"q": q})
    body = await response.json()
    assert response.status == 400 and body["error"] == "invalid_request" and body["argument"] == "q", body
    assert body["work"] > body["work_limit"] and body["recovery"]
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "search_within_book", "arguments": {"book_id": book, "q": q}}}  # fmt: skip
    result = await (await client.post("/api/mcp", json=message, headers={"Accept": "application/json"})).json()
    assert result["result"]["isError"] is True
    assert result["result"]["structuredContent"]["error"] == "invalid_request"
    assert await _text_used(client, {}) == 0  # refused: its unit refunded
    fine = await client.get(f"/api/books/{book}/search", params={"q": " ".join(phrases[:3])})
    assert fine.status == 200 and (await fine.json())["total"] == 2000
