"""Book pages: ``/book/{slug}`` (metadata, attribution, chapters, page thumbnails), ``/book/{slug}?page=N``, the
page that citation URLs open (the page image in a deep-zoom viewer, its text side by side, citations, illustrations),
and ``/book/{slug}?q=words``, the "search in this book" results (the ``search_within_book`` tool, metered as it is).

The reading page costs what ``GET /api/books/{slug}/quote?page=N`` costs, since the text it shows is that tool's output:
one request and one unit of the text pool. Book metadata and the illustration outlines deliver no budgeted content.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from imagesvc import tools
from imagesvc.access.headers import next_steps
from imagesvc.errors import NotFound, RateLimited
from imagesvc.pages.assets import VIEWER_READY
from imagesvc.pages.render import render
from imagesvc.web.app_keys import CALLER, METER, SERVICES
from imagesvc.web.params import accepts
from imagesvc.web.rest import tool_call

__all__ = ["LOW_BUDGET", "book", "offers"]

MAX_IMAGES = 200  # get_book_images' largest page
LOW_BUDGET = 50  # pages of text left today at which a reading page offers the next class (or a tenth of the budget)


def offers(request: web.Request, pool: str, limited: RateLimited | None = None) -> dict[str, Any] | None:
    """What a page says when ``pool`` runs low or out: how much is left, and each way to get more (``next_steps``
    with its link, where the site has one). None while plenty is left or the caller's class is uncapped."""
    state = request[METER].states.get(pool)
    if limited is None:
        if state is None or state.limit is None or state.remaining is None:
            return None
        if state.remaining > max(LOW_BUDGET, state.limit // 10):
            return None
    settings = request.app[SERVICES].settings
    links = {"sign_in": settings.sign_in_url, "get_free_key": settings.keys_url}
    steps = [{**step, "url": links.get(step["action"], "")} for step in next_steps(request[CALLER].allowance, pool)]
    remaining = 0 if limited is not None or state is None else state.remaining
    return {"remaining": remaining, "limit": state.limit if state is not None else None, "steps": steps}


@accepts(
    {
        "properties": {
            "page": {"type": "integer", "minimum": 1, "description": "The reading page of page N."},
            "q": {"type": "string", "description": "Search in this book (search_within_book)."},
        }
    }
)
async def book(request: web.Request, arguments: dict[str, Any]) -> web.Response:
    """``GET /book/{slug}``: the book page; with ``?page=N``, that page's reading page (the citation URL); with
    ``?q=words``, the pages of the book that hold them."""
    if arguments.get("q") is not None:
        return await _search(request, arguments["q"])
    if arguments.get("page") is None:
        return await _overview(request)
    return await _reading(request, arguments["page"])


def segments(text: str, highlights: list[list[int]]) -> list[tuple[str, bool]]:
    """A snippet as ``(text, marked)`` runs for the template, which escapes each (no markup built here)."""
    out, at = [], 0
    for start, end in highlights:
        out += [(text[at:start], False), (text[start:end], True)]
        at = end
    return [run for run in [*out, (text[at:], False)] if run[0]]


async def _search(request: web.Request, q: str) -> web.Response:
    services = request.app[SERVICES]
    args = {"book_id": request.match_info["slug"], "q": q}
    result = await tools.call(services, "search_within_book", args, tool_call(request))
    book = await _book(request)
    hits = [
        {**hit, "snippets": [{**s, "segments": segments(s["text"], s["highlights"])} for s in hit["snippets"]]}
        for hit in result["hits"]
    ]
    context = {"title": f"{book['title']}: {q}", "book": book, "q": q, "result": result, "hits": hits}
    context["fields"] = {"ocr": "Transcription", "translation": "Translation", "original": "Original"}
    return render(request, "book_search.html", context, headers={"Cache-Control": "private, no-store"})


async def _book(request: web.Request) -> dict[str, Any]:
    args = {"book_id": request.match_info["slug"]}
    return await tools.call(request.app[SERVICES], "get_book", args, tool_call(request))


async def _overview(request: web.Request) -> web.Response:
    book = await _book(request)
    return render(request, "book.html", {"title": book["title"], "book": book, "rtl": _rtl(book)})


def _rtl(book: dict[str, Any]) -> bool:
    return book.get("viewing_direction") == "right-to-left"


async def _page_images(request: web.Request, book_id: str, number: int) -> list[dict[str, Any]]:
    """The illustrations on page ``number``, from get_book_images (paged through for books with many)."""
    services, call, found, offset = request.app[SERVICES], tool_call(request), [], 0
    while True:
        args = {"book_id": book_id, "limit": MAX_IMAGES, "offset": offset}
        result = await tools.call(services, "get_book_images", args, call)
        found += [i for i in result["items"] if i["page"] == number]
        if not result["has_more"]:
            return found
        offset += MAX_IMAGES


async def _reading(request: web.Request, number: int) -> web.Response:
    services = request.app[SERVICES]
    book = await _book(request)
    quote: dict[str, Any] | None = None
    limited: RateLimited | None = None
    try:
        args = {"book_id": book["id"], "page": number, "include_original": True}
        quote = await tools.call(services, "get_quote", args, tool_call(request))
    except RateLimited as exc:
        # The text budget is spent: the page still shows its image and says when the text comes back, with the
        # status and Retry-After the API would send (a request-limit denial never gets this far).
        limited = exc
    numbers = [p["page"] for p in book["pages"]]
    if number not in numbers:  # only if the catalog changed between the two reads (get_quote checked the page)
        raise NotFound(f"{book['title']!r} has no page {number}.", details={"book_id": book["id"]})
    at = numbers.index(number)
    page = book["pages"][at]
    images = [] if page.get("image_unavailable") else await _page_images(request, book["id"], number)
    context = {
        "title": f"{book['title']}, p. {number}",
        "book": book,
        "page": page,
        "quote": quote,
        "limited": limited,
        "images": images,
        "rtl": _rtl(book),
        "prev": book["pages"][at - 1] if at > 0 else None,
        "next": book["pages"][at + 1] if at + 1 < len(numbers) else None,
        "position": at + 1,
        "iiif_info": f"/iiif/3/{book['id']}-{number}/info.json",
        "viewer": request.app[VIEWER_READY],
    }
    context["offers"] = offers(request, "text", limited)
    headers = {"Cache-Control": "private, no-store"}  # metered text, sealed per key
    if limited is not None:
        return render(request, "reading.html", context, status=limited.status, headers={**headers, **limited.headers})
    return render(request, "reading.html", context, headers=headers)
