"""Gallery, collection and vector handlers: parse the query string, call a gallery tool, return its JSON."""

from __future__ import annotations

import math
from typing import Any

from aiohttp import web

from imagesvc import tools
from imagesvc.errors import InvalidRequest
from imagesvc.web.keys import SERVICES
from imagesvc.web.params import bool_param, int_param, str_param
from imagesvc.web.rest import tool_call

__all__ = ["book_images", "collection", "collections", "gallery", "image", "vectors"]


async def _call(request: web.Request, name: str, args: dict[str, Any]) -> web.Response:
    args = {k: v for k, v in args.items() if v is not None}
    return web.json_response(await tools.call(request.app[SERVICES], name, args, tool_call(request)))


def _float_param(request: web.Request, name: str) -> float | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise InvalidRequest(
            f"Parameter {name!r} must be a number, not {raw!r}.",
            recovery=["Similarity scores lie roughly between -1 and 1.1; try min_score=0.2."],
            details={"parameter": name},
        )
    return value


async def gallery(request: web.Request) -> web.Response:
    """``GET /gallery``: search illustrations (``search_images`` with ``q``, ``book`` and ``maxPerBook``)."""
    limit = int_param(request, "limit", 20, minimum=1, maximum=50)
    args = {
        "query": str_param(request, "q"),
        "like": str_param(request, "like"),
        "type": str_param(request, "type"),
        "subject": str_param(request, "subject"),
        "figure": str_param(request, "figure"),
        "symbol": str_param(request, "symbol"),
        "year_from": int_param(request, "year_from"),
        "year_to": int_param(request, "year_to"),
        "book_id": str_param(request, "book"),
        "collection": str_param(request, "collection"),
        "max_per_book": int_param(request, "maxPerBook", 3, minimum=1, maximum=1_000_000),
        "fold_duplicates": bool_param(request, "fold_duplicates", False),
        "limit": limit,
        "offset": int_param(request, "offset", 0, minimum=0, maximum=100_000),
        "cursor": str_param(request, "cursor"),
        "min_score": _float_param(request, "min_score"),
    }
    return await _call(request, "search_images", args)


async def image(request: web.Request) -> web.Response:
    return await _call(request, "get_image", {"id": request.match_info["id"]})


async def book_images(request: web.Request) -> web.Response:
    args = {
        "book_id": request.match_info["book_id"],
        "limit": int_param(request, "limit", 50, minimum=1, maximum=200),
        "offset": int_param(request, "offset", 0, minimum=0),
    }
    return await _call(request, "get_book_images", args)


async def collections(request: web.Request) -> web.Response:
    return await _call(request, "list_collections", {})


async def collection(request: web.Request) -> web.Response:
    return await _call(request, "get_collection", {"slug": request.match_info["slug"]})


async def vectors(request: web.Request) -> web.Response:
    """``GET /vectors/{store}``: keyset pages (``after``, ``limit`` up to 1000), ``format=json|base64``."""
    args = {
        "store": request.match_info["store"],
        "after": str_param(request, "after"),
        "limit": int_param(request, "limit", 100, minimum=1, maximum=1000),
        "format": str_param(request, "format", "json", choices=("json", "base64")),
    }
    return await _call(request, "get_vectors", args)
