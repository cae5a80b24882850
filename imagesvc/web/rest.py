"""REST handlers: parse the query, call a tool, shape the response. No SQL and no pixel work here."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp import web

from imagesvc import __version__, tools
from imagesvc.errors import InvalidRequest, NotFound
from imagesvc.search.engine import engine_for
from imagesvc.storage import StoreUnavailable
from imagesvc.web.keys import CALLER, METER, SERVICES
from imagesvc.web.params import bool_param, int_param, str_param

__all__ = ["book", "books", "health", "library", "public_image"]


async def health(request: web.Request) -> web.Response:
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


async def books(request: web.Request) -> web.Response:
    args = {
        "limit": int_param(request, "limit", 50, minimum=1, maximum=200),
        "skip": int_param(request, "skip", int_param(request, "offset", 0, minimum=0), minimum=0),
    }
    return web.json_response(await tools.call(request.app[SERVICES], "list_books", args, tool_call(request)))


async def library(request: web.Request) -> web.Response:
    """``GET /books/library``: the list_books tool; each query parameter is one of its arguments, typed by its
    input schema (an unknown parameter is a 400 naming the known ones)."""
    schema = tools.load_all()["list_books"].input_schema["properties"]
    unknown = sorted(set(request.query) - set(schema))
    if unknown:
        raise InvalidRequest(
            f"Unknown parameter {unknown[0]!r} for /books/library.",
            recovery=[f"Use: {', '.join(schema)}."],
            details={"parameter": unknown[0]},
        )
    args: dict[str, object] = {}
    for name, spec in schema.items():
        if spec.get("type") == "integer":
            value: object = int_param(request, name, minimum=spec.get("minimum"), maximum=spec.get("maximum"))
        elif spec.get("type") == "boolean":
            value = bool_param(request, name, None)  # type: ignore[arg-type]
        else:
            value = str_param(request, name)
        if value is not None:
            args[name] = value
    return web.json_response(await tools.call(request.app[SERVICES], "list_books", args, tool_call(request)))


async def book(request: web.Request) -> web.Response:
    args = {"book_id": request.match_info["book_id"]}
    result = await tools.call(request.app[SERVICES], "get_book", args, tool_call(request))
    return web.json_response(result)


def tool_call(request: web.Request) -> tools.Call:
    """The caller and meter the access middleware attached to this request."""
    return tools.Call(caller=request[CALLER], meter=request[METER])


IMMUTABLE = "public, max-age=31536000, immutable"


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
