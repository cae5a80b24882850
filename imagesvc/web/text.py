"""REST doors of the quote and text tools: ``/books/{id}/quote``, ``/verify``, ``/books/{id}/text`` and
``/books/{id}/search``.

A response that serves fewer pages than were asked for carries ``X-Pages-Truncated`` (see docs/quotes.md).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from imagesvc.web.rest import tool_route

__all__ = ["TRUNCATED_HEADER", "book_text", "quote", "search", "verify"]

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


def _quote(result: dict[str, Any]) -> web.Response:
    return web.json_response(result, headers=truncation_headers(result))


def _text(result: dict[str, Any]) -> web.Response:
    headers = truncation_headers(result)
    if result["format"] == "plain":
        return web.Response(text=result["text"], content_type="text/plain", charset="utf-8", headers=headers)
    return web.json_response(result, headers=headers)


quote = tool_route("get_quote", _quote)
verify = tool_route("get_quote", _quote, "The get_quote tool with the book as a query parameter (for URL allow-lists).")
book_text = tool_route("get_book_text", _text)
search = tool_route("search_within_book", _quote)  # GET /books/{id}/search: snippets are page text, cut like quotes
