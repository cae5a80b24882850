"""Quote tools (one page with its citation, or up to 25), and the page, range and budget helpers text tools share.

Every page whose text is delivered costs one unit of the caller's ``text`` pool (context pages included); a request
for more pages than remain is served in part and says so (``truncated``, ``pages_served``, ``next_from``). Text served
to an API key carries one colophon per text field (see ``citations.Sealer``).
"""

from __future__ import annotations

from typing import Any

from imagesvc.errors import InvalidRequest, NotFound, RateLimited
from imagesvc.services import Services
from imagesvc.surface.citations import Sealer, attribution, citation, doi_url
from imagesvc.tools import Call, tool
from imagesvc.tools.books import require_book

__all__ = [
    "FIELD_NAMES",
    "MAX_QUOTES",
    "PAGE_SCHEMA",
    "TEXT_POOL",
    "available",
    "book_ref",
    "counts",
    "get_quote",
    "get_quotes",
    "no_page",
    "page_range",
    "reserve_text",
    "spoken_list",
]

MAX_QUOTES = 25
TEXT_POOL = "text"
FIELD_NAMES = {"ocr": "OCR text", "translation": "translation", "original": "original-language text"}
PAGE_SCHEMA = {"type": "integer", "minimum": 1, "maximum": 1_000_000}


def available(page: dict[str, Any]) -> list[str]:
    """The text fields this page has (``ocr``, ``translation``, ``original``)."""
    return [field for field in ("ocr", "translation", "original") if page.get(field) is not None]


def spoken_list(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join(filter(None, [", ".join(items[:-1]), items[-1]])) if items else ""


def no_page(book: dict[str, Any], numbers: list[int], asked: str) -> NotFound:
    """404 for pages a book does not have (``asked`` says which, e.g. 'page 99'), naming the valid range."""
    held = f"pages {numbers[0]}–{numbers[-1]}" if numbers else "no pages"
    return NotFound(
        f"{book['title']!r} has no {asked}; it has {held}.",
        recovery=[f"Ask for pages from {numbers[0]} to {numbers[-1]}." if numbers else "This book has no pages yet."],
        details={
            "book_id": book["id"],
            "first_page": numbers[0] if numbers else None,
            "last_page": numbers[-1] if numbers else None,
        },
    )


def book_ref(services: Services, book: dict[str, Any]) -> dict[str, Any]:
    """The edition a text comes from: identity, year, translator, DOI and the book's citation URL."""
    keys = ("id", "slug", "title", "author", "year", "translator", "doi")
    return {
        **{k: book[k] for k in keys},
        "doi_url": doi_url(book["doi"]),
        "citation_url": services.book_url(book["slug"]),
    }


async def reserve_text(call: Call, wanted: int) -> int:
    """Hold up to ``wanted`` text units; 0 when nothing is wanted. Raises RateLimited when none remain."""
    return await call.meter.reserve(TEXT_POOL, wanted, allow_partial=True) if wanted else 0


def counts(requested: int, served: int, next_from: int | None, reason: str | None) -> dict[str, Any]:
    """The page accounting every text response carries; ``reason`` (``budget``/``page_limit``) marks a cut."""
    out: dict[str, Any] = {"pages_requested": requested, "pages_served": served, "truncated": reason is not None}
    if reason is not None:
        out["truncated_reason"] = reason
        if next_from is not None:
            out["next_from"] = next_from
    return out


def _quote(
    services: Services, book: dict[str, Any], page: dict[str, Any], sealer: Sealer, include_original: bool
) -> dict[str, Any]:
    url = services.page_url(book["slug"], page["number"])
    body: dict[str, Any] = {
        "page": page["number"],
        "citation_url": url,
        "ocr": sealer.seal(page["ocr"], url),
        "translation": sealer.seal(page["translation"], url),
    }
    if include_original:
        body["original"] = sealer.seal(page["original"], url)
    body["available"] = available(page)
    return body


@tool(
    "get_quote",
    {
        "required": ["book_id", "page"],
        "properties": {
            "book_id": {"type": "string", "minLength": 1, "description": "Book id or slug."},
            "page": {**PAGE_SCHEMA, "description": "Page number."},
            "include_original": {"type": "boolean", "default": True, "description": "Add original-language text."},
            "include_context": {"type": "boolean", "default": False, "description": "Add the pages either side."},
        },
    },
)
async def get_quote(
    services: Services,
    call: Call,
    book_id: str,
    page: int,
    include_original: bool = True,
    include_context: bool = False,
) -> dict[str, Any]:
    """Exact text of one page with a stable citation URL and formatted citations (inline, footnote, bibliography, DOI).

    Costs one text unit, plus one per context page served; context pages that no longer fit the budget are left
    out (``truncated: true``). Errors: unknown book or page (404, naming the valid range), budget exhausted (429).
    """
    book = await require_book(services, book_id)
    row = await services.db.page(book["id"], page)
    if row is None:
        raise no_page(book, await services.db.page_numbers(book["id"]), f"page {page}")
    await call.meter.reserve(TEXT_POOL, 1)
    sealer = Sealer.for_call(book, call.caller.key_ref, services.colophon_secret)
    ref = book_ref(services, book)
    body = {"book_id": ref.pop("id"), **ref, **_quote(services, book, row, sealer, include_original)}
    served, requested, reason = 1, 1, None
    if include_context:
        around = [p for p in [await services.db.page(book["id"], page + d) for d in (-1, 1)] if p is not None]
        requested += len(around)
        try:
            granted = await reserve_text(call, len(around))
        except RateLimited:
            granted = 0
        reason = "budget" if granted < len(around) else None
        served += granted
        body["context"] = [_quote(services, book, p, sealer, include_original) for p in around[:granted]]
    return {
        "quote": body,
        "citation": citation(book, page, body["citation_url"]),
        "license": book["license"],
        "attribution": attribution(book),
        "colophon": sealer.active,
        **counts(requested, served, None, reason),
    }


def page_range(bounds: dict[str, Any], default_first: int, default_last: int) -> tuple[int, int]:
    """``from``/``to`` of ``bounds`` (inclusive), with defaults; 400 when from > to."""
    first = bounds.get("from", default_first)
    last = bounds.get("to", default_last)
    if first > last:
        raise InvalidRequest(
            f"'from' ({first}) is after 'to' ({last}).",
            recovery=["Give from <= to; both are page numbers, inclusive."],
            details={"argument": "from"},
        )
    return first, last


@tool(
    "get_quotes",
    {
        "required": ["book_id"],
        "properties": {
            "book_id": {"type": "string", "minLength": 1, "description": "Book id or slug."},
            "pages": {
                "type": "array",
                "items": PAGE_SCHEMA,
                "minItems": 1,
                "maxItems": MAX_QUOTES,
                "uniqueItems": True,
            },
            "from": {**PAGE_SCHEMA, "description": "First page of a range (instead of pages)."},
            "to": {**PAGE_SCHEMA, "description": f"Last page of the range; at most {MAX_QUOTES} pages in all."},
            "include_original": {"type": "boolean", "default": True},
        },
    },
)
async def get_quotes(
    services: Services,
    call: Call,
    book_id: str,
    pages: list[int] | None = None,
    include_original: bool = True,
    **bounds: int,
) -> dict[str, Any]:
    """Verbatim text and citations for up to 25 pages of one book, as a list of pages or a from/to range.

    Pages the book does not have are skipped and listed in ``missing_pages``, for a list and a range alike (a range
    without ``to`` ends at the book's last page). One text unit per page served; when fewer remain, the first pages
    that fit are served (``truncated: true``, ``next_from``). Errors: both or neither of pages and from (400), a range
    over 25 pages (400), unknown book or none of the pages held (404), budget exhausted (429).
    """
    if (pages is None) == ("from" not in bounds):
        raise InvalidRequest(
            "Give either 'pages' (a list) or 'from' (with optional 'to'), not both and not neither.",
            recovery=[f"Example: pages=[3, 5] or from=3, to=10 (at most {MAX_QUOTES} pages)."],
        )
    book = await require_book(services, book_id)
    numbers = await services.db.page_numbers(book["id"])
    if pages is None:
        last_held = numbers[-1] if numbers else bounds["from"]
        default_last = max(bounds["from"], min(last_held, bounds["from"] + MAX_QUOTES - 1))
        first, last = page_range(bounds, bounds["from"], default_last)
        if last - first + 1 > MAX_QUOTES:
            raise InvalidRequest(
                f"get_quotes serves at most {MAX_QUOTES} pages; from={first} to={last} spans {last - first + 1}.",
                recovery=[f"Split the range into runs of {MAX_QUOTES}, or use get_book_text for long reading."],
                details={"argument": "to"},
            )
        asked = list(range(first, last + 1))
        where = f"page in {first}–{last}"
    else:
        asked = list(pages)
        where = "page " + ", ".join(map(str, pages))
    # One rule for a list and a range: pages the book lacks are skipped and named; none at all is a 404.
    held = set(numbers)
    wanted = [n for n in asked if n in held]
    if not wanted:
        raise no_page(book, numbers, where)
    granted = await reserve_text(call, len(wanted))
    sealer = Sealer.for_call(book, call.caller.key_ref, services.colophon_secret)
    quotes = []
    for number in wanted[:granted]:
        row = await services.db.page(book["id"], number)
        assert row is not None  # checked above, in this same request
        body = _quote(services, book, row, sealer, include_original)
        quotes.append({"quote": body, "citation": citation(book, number, body["citation_url"])})
    reason = "budget" if granted < len(wanted) else None
    rest = wanted[granted:]
    return {
        "book": book_ref(services, book),
        "quotes": quotes,
        "missing_pages": [n for n in asked if n not in held],
        "attribution": attribution(book),
        "license": book["license"],
        "colophon": sealer.active,
        **counts(len(asked), granted, rest[0] if rest and pages is None else None, reason),
        **({"remaining_pages": rest} if rest else {}),
    }
