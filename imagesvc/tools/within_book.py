"""The ``search_within_book`` tool: the pages of one book whose OCR, translation or original text hold the words
asked for, best first, each with snippets and its citation URL.

Metered as the other text tools are: a snippet is page text, so each page served costs one unit of the ``text`` pool;
pages that no longer fit the budget are left out (``truncated_reason: budget``). The search itself is work whatever it
finds, so it costs at least one unit, held before any work: a search that finds nothing costs what a search finding
one page costs, and a caller whose pool is spent starts none. Snippets served to a key carry a colophon, like every
text a key is served.

The search runs on a pool of its own, admitted per caller (``page_search_work``), and within a work budget
(``catalog.page_rank.SearchWork``: past it, a 400 naming the query).
"""

from __future__ import annotations

from typing import Any

from imagesvc.catalog.page_rank import FIELDS, SearchWork
from imagesvc.catalog.reader import reader
from imagesvc.catalog.text_fold import MAX_WORDS, Word, query_words
from imagesvc.errors import InvalidRequest, RateLimited
from imagesvc.services import Services
from imagesvc.surface.citations import Sealer, attribution
from imagesvc.surface.snippets import snippet
from imagesvc.tools import Call, tool
from imagesvc.tools.books import require_book
from imagesvc.tools.page_search_work import page_search_work
from imagesvc.tools.quotes import TEXT_POOL, book_ref, counts, reserve_text

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

    One text unit per page served, and at least one per search (a search that finds nothing costs one); when fewer
    remain, the best pages that fit are served (``truncated: true``). Errors: a query with no letter or digit, over 32
    words, or asking more work than one search may do (400), unknown book (404), budget exhausted or more searches
    of this caller at once than allowed (429), every search thread busy and the queue full (503).
    """
    words = query_words(q)
    if not words or len(words) > MAX_WORDS:
        raise InvalidRequest(
            f"The query {q[:80]!r} has no word to search for." if not words else f"The query has {len(words)} words.",
            recovery=[f'Give 1 to {MAX_WORDS} words (letters or digits, any script); quote a phrase with "...".'],
            details={"argument": "q"},
        )
    words = list(dict.fromkeys(words))  # a word asked twice is searched for, and highlighted, once
    fields = list(FIELDS) if field == "all" else [field]
    book = await require_book(services, book_id, counts=False)
    services.catalog.gate.check()  # the search's own reads bypass the gate: none starts while the catalog hangs
    async with page_search_work(services).admit(call.caller.subject) as place:
        await call.meter.reserve(TEXT_POOL, 1)  # the search's own unit, before any work (a spent pool starts none)
        # Both steps read and fold page texts: on the search pool's threads, each on a catalog connection of its own.
        found, total = await place.run(_find, services.catalog, book["id"], words, fields, limit, skip)
        granted = min(len(found), 1 + await _more_pages(call, len(found) - 1))
        sealer = Sealer.for_call(book, call.caller.key_ref, services.colophon_secret)
        hits = await place.run(_hits, services, book, found[:granted], words, sealer)
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


async def _more_pages(call: Call, wanted: int) -> int:
    """Text units held for the pages served past the first (the search's own unit pays for that one)."""
    try:
        return await reserve_text(call, wanted) if wanted > 0 else 0
    except RateLimited:
        return 0


def _find(
    catalog: Any, book_id: str, words: list[Word], fields: list[str], limit: int, skip: int
) -> tuple[list[tuple[int, float, tuple[str, ...]]], int]:
    with reader(catalog) as source:
        return source.search_pages(book_id, words, fields, limit=limit, offset=skip, work=SearchWork())


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
