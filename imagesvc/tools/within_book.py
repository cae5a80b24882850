"""The ``search_within_book`` tool: the pages of one book whose OCR, translation or original text hold the words
asked for, best first, each with snippets and its citation URL.

Metered as the other text tools are: a snippet is page text, so each page served costs one unit of the ``text`` pool;
pages that no longer fit the budget are left out (``truncated_reason: budget``); a search that finds nothing costs
nothing. Snippets served to a key carry a colophon, like every text a key is served.
"""

from __future__ import annotations

import asyncio
from typing import Any

from imagesvc.catalog.page_text import FIELDS
from imagesvc.catalog.reader import reader
from imagesvc.catalog.text_fold import MAX_WORDS, Word, query_words
from imagesvc.errors import InvalidRequest
from imagesvc.services import Services
from imagesvc.surface.citations import Sealer, attribution
from imagesvc.surface.snippets import snippet
from imagesvc.tools import Call, tool
from imagesvc.tools.books import require_book
from imagesvc.tools.quotes import book_ref, counts, reserve_text

__all__ = ["IN", "MAX_HITS", "search_within_book"]

MAX_HITS = 100
IN = ("all", *FIELDS)


@tool(
    "search_within_book",
    {
        "required": ["book_id", "q"],
        "properties": {
            "book_id": {"type": "string", "minLength": 1, "description": "Book id or slug."},
            "q": {
                "type": "string",
                "minLength": 1,
                "maxLength": 500,
                "x-aliases": ["query"],
                "description": 'Words to find, all of them, in any order; "double quotes" for a phrase. Any script: '
                "Chinese is found as written, without spaces; accents and Hebrew or Arabic points are ignored.",
            },
            "field": {
                "enum": list(IN),
                "default": "all",
                "description": "Which text to search: all, ocr, translation or original.",
            },
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_HITS, "default": 20},
            "skip": {"type": "integer", "minimum": 0, "maximum": 1_000_000, "default": 0, "description": "Offset."},
        },
    },
)
async def search_within_book(
    services: Services, call: Call, book_id: str, q: str, field: str = "all", limit: int = 20, skip: int = 0
) -> dict[str, Any]:
    """Search inside one book's pages: the pages whose OCR, translation or original text hold every word, ranked
    best first, each with snippets (matches marked by offsets) and the page's citation URL; ``total`` counts them all.

    One text unit per page served; when fewer remain, the best pages that fit are served (``truncated: true``). A
    search that finds nothing costs nothing. Errors: a query with no letter or digit, or over 32 words (400), unknown
    book (404), budget exhausted (429).
    """
    words = query_words(q)
    if not words or len(words) > MAX_WORDS:
        raise InvalidRequest(
            f"The query {q[:80]!r} has no word to search for." if not words else f"The query has {len(words)} words.",
            recovery=[f'Give 1 to {MAX_WORDS} words (letters or digits, any script); quote a phrase with "...".'],
            details={"argument": "q"},
        )
    fields = list(FIELDS) if field == "all" else [field]
    book = await require_book(services, book_id, counts=False)
    # Both steps read and fold page texts (a phrase is checked in every text holding its words): in a worker thread,
    # on a catalog connection of its own, so a long book never holds the event loop.
    found, total = await asyncio.to_thread(_find, services.catalog, book["id"], words, fields, limit, skip)
    granted = await reserve_text(call, len(found))
    sealer = Sealer.for_call(book, call.caller.key_ref, services.colophon_secret)
    hits = await asyncio.to_thread(_hits, services, book, found[:granted], words, sealer)
    reason = "budget" if granted < len(found) else None
    return {
        "book": book_ref(services, book),
        "q": q,
        "field": field,
        "hits": hits,
        "total": total,
        "limit": limit,
        "skip": skip,
        "has_more": skip + len(found) < total,
        **counts(len(found), granted, None, reason),
        "attribution": attribution(book),
        "license": book["license"],
        "colophon": sealer.active,
    }


def _find(
    catalog: Any, book_id: str, words: list[Word], fields: list[str], limit: int, skip: int
) -> tuple[list[tuple[int, float, tuple[str, ...]]], int]:
    with reader(catalog) as source:
        return source.search_pages(book_id, words, fields, limit=limit, offset=skip)


def _hits(
    services: Services,
    book: dict[str, Any],
    found: list[tuple[int, float, tuple[str, ...]]],
    words: list[Word],
    sealer: Sealer,
) -> list[dict[str, Any]]:
    """Each page found with its citation URL and a sealed snippet of each text the index says holds a word (no other
    text is scanned)."""
    hits = []
    with reader(services.catalog) as source:
        served = source.pages_numbered(book["id"], [number for number, _, _ in found])  # one query
        for number, score, texts in found:
            page = served.get(number)
            if page is None:  # withdrawn between the two reads
                continue
            url = services.page_url(book["slug"], number)
            snippets = []
            for name in texts:
                cut = snippet(page[name] or "", words)
                if cut is not None:
                    text = sealer.seal(cut["text"], url)
                    snippets.append({"field": name, "text": text, "highlights": cut["highlights"]})
            hits.append({"page": number, "citation_url": url, "score": score, "snippets": snippets})
    return hits
