"""REST doors of the quote and text tools: ``/books/{id}/quote``, ``/verify`` and ``/books/{id}/text``.

A response that serves fewer pages than were asked for carries ``X-Pages-Truncated`` (see docs/quotes.md).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from imagesvc import tools
from imagesvc.errors import InvalidRequest
from imagesvc.tools.book_text import CONTENT, FORMATS
from imagesvc.web.keys import SERVICES
from imagesvc.web.params import bool_param, int_param, str_param
from imagesvc.web.rest import tool_call

__all__ = ["TRUNCATED_HEADER", "book_text", "quote", "verify"]

TRUNCATED_HEADER = "X-Pages-Truncated"


def truncation_headers(result: dict[str, Any]) -> dict[str, str]:
    """``X-Pages-Truncated: requested=50; served=20; reason=budget; next_from=21`` when a result was cut, else none."""
    if not result.get("truncated"):
        return {}
    parts = [f"requested={result['pages_requested']}", f"served={result['pages_served']}"]
    parts.append(f"reason={result['truncated_reason']}")
    if result.get("next_from") is not None:
        parts.append(f"next_from={result['next_from']}")
    return {TRUNCATED_HEADER: "; ".join(parts)}


async def _quote(request: web.Request, book_id: str) -> web.Response:
    page = int_param(request, "page")
    if page is None:
        raise InvalidRequest(
            "Parameter 'page' is required: the page number to quote.",
            recovery=["Add ?page=<n>; GET /books/<id> lists the book's pages."],
            details={"parameter": "page"},
        )
    args = {
        "book_id": book_id,
        "page": page,
        "include_original": bool_param(request, "include_original", True),
        "include_context": bool_param(request, "include_context", False),
    }
    result = await tools.call(request.app[SERVICES], "get_quote", args, tool_call(request))
    return web.json_response(result, headers=truncation_headers(result))


async def quote(request: web.Request) -> web.Response:
    """``GET /books/{book_id}/quote?page=N&include_original=true&include_context=false``: the get_quote tool."""
    return await _quote(request, request.match_info["book_id"])


async def verify(request: web.Request) -> web.Response:
    """``GET /verify?book_id=&page=``: the same answer as /books/{book_id}/quote, for URL allow-lists."""
    book_id = str_param(request, "book_id")
    if book_id is None:
        raise InvalidRequest(
            "Parameter 'book_id' is required: a book id or slug.",
            recovery=["Add ?book_id=<id or slug>&page=<n>; GET /books lists the books."],
            details={"parameter": "book_id"},
        )
    return await _quote(request, book_id)


async def book_text(request: web.Request) -> web.Response:
    """``GET /books/{book_id}/text?content=ocr|translation|both&from=&to=&format=json|plain``: get_book_text."""
    args: dict[str, Any] = {
        "book_id": request.match_info["book_id"],
        "content": str_param(request, "content", "both", choices=CONTENT),
        "format": str_param(request, "format", "json", choices=FORMATS),
    }
    for name in ("from", "to"):
        value = int_param(request, name, minimum=1)
        if value is not None:
            args[name] = value
    result = await tools.call(request.app[SERVICES], "get_book_text", args, tool_call(request))
    headers = truncation_headers(result)
    if result["format"] == "plain":
        return web.Response(text=result["text"], content_type="text/plain", charset="utf-8", headers=headers)
    return web.json_response(result, headers=headers)
