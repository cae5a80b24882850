"""REST handlers: parse the query, call a tool, shape the response. No SQL and no pixel work here."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from imagesvc import __version__, tools
from imagesvc.errors import NotFound
from imagesvc.search.engine import engine_for
from imagesvc.storage import StoreUnavailable
from imagesvc.web.keys import CALLER, METER, SERVICES
from imagesvc.web.params import QUERY_SCHEMA, accepts, any_query, query_arguments

__all__ = ["TOOL", "book", "books", "health", "library", "public_image", "tool_call", "tool_route"]

TOOL = "tool"  # the attribute under which a tool route's handler names its tool
Shape = Callable[[dict[str, Any]], web.StreamResponse]


def tool_route(name: str, shape: Shape = web.json_response, doc: str | None = None) -> Callable[..., Any]:
    """A handler for tool ``name``: path parameters and the query string (parsed by the tool's input schema) are its
    arguments, ``shape`` makes the response. Unknown, repeated or ill-typed parameters are a 400 naming them."""
    schema = tools.load_all()[name].input_schema

    async def handler(request: web.Request) -> web.StreamResponse:
        path = dict(request.match_info)
        arguments = {**query_arguments(request, schema, skip=path), **path}  # names checked here, values by the tool
        return shape(await tools.call(request.app[SERVICES], name, arguments, tool_call(request)))

    handler.__doc__ = doc or tools.load_all()[name].description
    handler.__name__ = handler.__qualname__ = name
    setattr(handler, QUERY_SCHEMA, schema)
    setattr(handler, TOOL, name)
    return handler


books = tool_route("list_books", doc="All books: the catalogue browser (list_books) with no filter needed.")
library = tool_route("list_books")  # GET /books/library: the spec's catalogue browser, every filter of list_books
book = tool_route("get_book")


@accepts({"properties": {}})
async def health(request: web.Request, arguments: dict[str, Any]) -> web.Response:
    """Version, storage backend and whether it answers, and catalog counts; 503 when the store is down."""
    services = request.app[SERVICES]
    storage: dict[str, object] = {"backend": services.store.name, "reachable": True}
    try:
        await services.store.ping()
    except StoreUnavailable as exc:
        storage.update(reachable=False, error=exc.message)
    body = {
        "status": "ok" if storage["reachable"] else "degraded",
        "version": __version__,
        "storage": storage,
        "catalog": services.catalog.counts(),
        "search": engine_for(services).status(),
        "image_host": services.settings.image_base,
    }
    return web.json_response(body, status=200 if storage["reachable"] else 503)


def tool_call(request: web.Request) -> tools.Call:
    """The caller and meter the access middleware attached to this request."""
    return tools.Call(caller=request[CALLER], meter=request[METER])


IMMUTABLE = "public, max-age=31536000, immutable"


@any_query  # a static file host: caches and pages add cache-busting query strings, and the file is the same
async def public_image(request: web.Request) -> web.StreamResponse:
    """The public prefix of the local store under /img/: strong ETags, 304s, ranges, cacheable forever.

    Only ``pub/`` objects are reachable here; masters and clean copies have no public URL.
    """
    services = request.app[SERVICES]
    relative = request.match_info["path"]
    path_for = getattr(services.store, "path_for", None)
    if path_for is None:
        raise NotFound(
            "Images are served by the image host, not by this app, when storage is S3.",
            recovery=[f"Fetch images under {services.settings.image_base}/."],
        )
    try:
        path: Path = path_for(f"pub/{relative}")
    except ValueError:
        path = None  # type: ignore[assignment]
    if path is None or not await _is_file(path):
        raise NotFound(f"No public image at /img/{relative}.", recovery=["Take image URLs from GET /books/<id>."])
    response = web.FileResponse(path, headers={"Cache-Control": IMMUTABLE, "Content-Type": "image/jpeg"})
    return response


async def _is_file(path: Path) -> bool:
    return await asyncio.to_thread(path.is_file)
