"""The ``get_book_text`` tool: up to 200 pages of a book's OCR text, translation or both, as JSON or plain text."""

from __future__ import annotations

from typing import Any

from imagesvc.errors import NotFound
from imagesvc.services import Services
from imagesvc.surface.citations import Sealer, attribution, bibliography, doi_url
from imagesvc.tools import Call, tool
from imagesvc.tools.books import require_book
from imagesvc.tools.quotes import (
    FIELD_NAMES,
    PAGE_SCHEMA,
    available,
    book_ref,
    counts,
    no_page,
    page_range,
    reserve_text,
    spoken_list,
)

__all__ = ["CONTENT", "FORMATS", "MAX_TEXT_PAGES", "get_book_text", "render_plain"]

MAX_TEXT_PAGES = 200
CONTENT = ("ocr", "translation", "both")
FORMATS = ("json", "plain")
_FIELDS = {"ocr": ("ocr",), "translation": ("translation",), "both": ("ocr", "translation")}
_LABELS = {"ocr": "[OCR]", "translation": "[Translation]"}


def _lacking(book: dict[str, Any], pages: list[dict[str, Any]], content: str) -> NotFound:
    """404 for a range in which no page has the content asked for, saying what the pages do have."""
    asked = " or ".join(FIELD_NAMES[f] for f in _FIELDS[content])
    has = sorted({f for p in pages for f in available(p)}, key=list(FIELD_NAMES).index)
    where = f"page {pages[0]['number']}" if len(pages) == 1 else f"pages {pages[0]['number']}–{pages[-1]['number']}"
    held = spoken_list([FIELD_NAMES[f] for f in has]) or "no text at all"
    recovery = [f"Ask for content={f}." for f in has if f in CONTENT]
    if "original" in has:
        recovery.append("get_quote (GET /books/<id>/quote) returns the original-language text.")
    return NotFound(
        f"{where.capitalize()} of {book['title']!r} has no {asked}; it has {held}.",
        recovery=recovery or ["Try another page range."],
        details={"book_id": book["id"], "content": content, "available": has},
    )


def _page_text(page: dict[str, Any], fields: tuple[str, ...]) -> str:
    """One page's body in plain format: each asked-for text under its label."""
    return "\n".join(f"{_LABELS[f]}\n{page[f]}" for f in fields if page[f] is not None)


@tool(
    "get_book_text",
    {
        "required": ["book_id"],
        "properties": {
            "book_id": {"type": "string", "minLength": 1, "description": "Book id or slug."},
            "content": {"enum": list(CONTENT), "default": "both", "description": "ocr, translation, or both."},
            "from": {**PAGE_SCHEMA, "description": "First page, inclusive (default: the first page)."},
            "to": {**PAGE_SCHEMA, "description": f"Last page, inclusive; at most {MAX_TEXT_PAGES} pages per call."},
            "format": {"enum": list(FORMATS), "default": "json", "description": "json pages or one plain text."},
        },
    },
)
async def get_book_text(
    services: Services, call: Call, book_id: str, content: str = "both", format: str = "json", **bounds: int
) -> dict[str, Any]:
    """Read up to 200 pages of a book in one call: OCR text, translation, or both, over an inclusive page range.

    Longer ranges are cut at 200 pages (``truncated_reason: page_limit``, ``next_from``). One text unit per page
    served; when fewer remain, the first pages that fit are served (``truncated_reason: budget``). Pages lacking
    the asked-for text are listed in ``missing`` and cost nothing. Errors: from > to (400), unknown book or no page
    in range (404), no page in range with the asked-for text (404 naming what they have), budget exhausted (429).
    """
    book = await require_book(services, book_id)
    numbers = await services.db.page_numbers(book["id"])
    if not numbers:
        raise no_page(book, numbers, "pages")
    # an open range ends at the last page, or at 'from' when that lies past it: 'from' alone is never blamed on a 'to'
    first, last = page_range(bounds, numbers[0], max(numbers[-1], bounds.get("from", numbers[0])))
    in_range = [n for n in numbers if first <= n <= last]
    if not in_range:
        raise no_page(book, numbers, f"page in {first}–{last}" if "to" in bounds else f"page {first} or later")
    cut = in_range[:MAX_TEXT_PAGES]
    pages = await services.db.pages(book["id"], cut[0], cut[-1])
    fields = _FIELDS[content]
    deliverable = [p for p in pages if any(p[f] is not None for f in fields)]
    if not deliverable:
        raise _lacking(book, pages, content)
    granted = await reserve_text(call, len(deliverable))
    served = deliverable[:granted]
    if granted < len(deliverable):
        reason, next_from = "budget", deliverable[granted]["number"]
    elif len(in_range) > MAX_TEXT_PAGES:
        reason, next_from = "page_limit", in_range[MAX_TEXT_PAGES]
    else:
        reason, next_from = None, None
    sealer = Sealer.for_call(book, call.caller.key_ref, services.colophon_secret)
    served_ids = {p["number"] for p in served}
    with_text = {p["number"] for p in deliverable}
    result: dict[str, Any] = {
        "book": book_ref(services, book),
        "content": content,
        "from": first,
        "to": last,
        "format": format,
        "missing": [{"page": p["number"], "available": available(p)} for p in pages if p["number"] not in with_text],
        **counts(len(in_range), len(served), next_from, reason),
        "max_pages": MAX_TEXT_PAGES,
        "citation": {
            "bibliography": bibliography(book),
            "citation_url": services.book_url(book["slug"]),
            "doi_url": doi_url(book["doi"]),
        },
        "attribution": attribution(book),
        "license": book["license"],
        "colophon": sealer.active,
    }
    if format == "plain":
        result["text"] = render_plain(services, book, result, served, fields, sealer)
        return result
    result["pages"] = []
    for page in pages:
        if page["number"] not in served_ids:
            continue
        url = services.page_url(book["slug"], page["number"])
        entry: dict[str, Any] = {"page": page["number"], "citation_url": url}
        entry.update({f: sealer.seal(page[f], url) for f in fields})
        result["pages"].append(entry)
    return result


def render_plain(
    services: Services,
    book: dict[str, Any],
    result: dict[str, Any],
    pages: list[dict[str, Any]],
    fields: tuple[str, ...],
    sealer: Sealer,
) -> str:
    """The plain form: a heading (edition, citation, range, any cut), then one block per page, each opening with a
    ``=== Page N · <url> ===`` line and, for a key, closed by its own colophon. Blocks are separated by a blank line."""
    head = [
        book["title"],
        result["citation"]["bibliography"],
        result["citation"]["citation_url"],
        f"Content: {result['content']}; pages {result['from']}–{result['to']}; "
        f"{result['pages_served']} of {result['pages_requested']} pages served.",
    ]
    if result["truncated"]:
        head.append(f"Truncated ({result['truncated_reason']}): continue with from={result['next_from']}.")
    if result["missing"]:
        head.append("Without the asked-for text: pages " + ", ".join(str(m["page"]) for m in result["missing"]) + ".")
    blocks = ["\n".join(head)]
    for page in pages:
        url = services.page_url(book["slug"], page["number"])
        block = f"=== Page {page['number']} · {url} ===\n{_page_text(page, fields)}"
        blocks.append(sealer.seal(block, url) or block)
    return "\n\n".join(blocks) + "\n"
