"""One name per concept: every tool's answer on the demo library, walked key by key, against docs/api.md's table."""

from __future__ import annotations

import re
from typing import Any

from aiohttp.test_utils import TestClient

from imagesvc import tools
from imagesvc.access.identity import Caller
from imagesvc.access.meter import Meter
from imagesvc.web.app_keys import ACCESS, SERVICES

BOOK = "demo-speculum-fornacum"
SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
SPEC_NAMES = {"imageCount"}  # the spec's own name for a collection's count
# Synonyms the vocabulary replaced: a page number is `page`, a citation link `citation_url`, a list `items`.
RETIRED = {"number", "url", "books", "collections", "images", "tiers", "pageNumber", "bookId", "hasMore"}
LISTS = ("list_books", "search_images", "get_book_images", "list_collections")
ENVELOPE = {"items", "total", "limit", "offset", "has_more", "next_cursor"}


async def _call(client: TestClient, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    app = client.server.app
    caller = Caller("anonymous", "ip:127.0.0.1", "anonymous")
    meter = Meter(app[ACCESS], caller)
    try:
        return await tools.call(app[SERVICES], name, arguments, tools.Call(caller, meter))
    finally:
        await meter.settle(True)


def _keys(value: Any, path: str = "") -> list[tuple[str, str]]:
    """(path, key) for every object key in ``value``; metadata term lists and sizes' tier names included."""
    out = []
    if isinstance(value, dict):
        for key, item in value.items():
            out.append((path, key))
            out += _keys(item, f"{path}.{key}")
    elif isinstance(value, list):
        for item in value:
            out += _keys(item, f"{path}[]")
    return out


async def test_every_answer_uses_the_one_vocabulary(client: TestClient) -> None:
    first = (await _call(client, "search_images", {"limit": 1}))["items"][0]
    calls = {
        "list_books": {"limit": 2},
        "get_book": {"book_id": BOOK},
        "get_quote": {"book_id": BOOK, "page": 2, "include_context": True},
        "get_quotes": {"book_id": BOOK, "pages": [1, 2]},
        "get_book_text": {"book_id": BOOK, "from": 1, "to": 2},
        "search_images": {"query": "serpent", "limit": 3},
        "get_image": {"id": first["id"]},
        "get_book_images": {"book_id": BOOK, "limit": 2},
        "list_collections": {},
        "get_collection": {"slug": "demo-highlights"},
    }
    for name, arguments in calls.items():
        answer = await _call(client, name, arguments)
        bad = [
            (path, key)
            for path, key in _keys(answer)
            if key not in SPEC_NAMES and (not SNAKE.match(key) or key in RETIRED)
        ]
        assert not bad, (name, bad)
        if name in LISTS:
            assert answer.keys() >= ENVELOPE, name
    book = await _call(client, "get_book", {"book_id": BOOK})
    item = (await _call(client, "get_book_images", {"book_id": BOOK, "limit": 1}))["items"][0]
    quote = await _call(client, "get_quote", {"book_id": BOOK, "page": item["page"]})
    assert item["book_id"] == book["id"] == quote["quote"]["book_id"]
    page = next(p for p in book["pages"] if p["page"] == item["page"])
    assert page["citation_url"] == item["citation_url"] == quote["quote"]["citation_url"]
    assert quote["citation"]["citation_url"] == page["citation_url"]
