"""REST handlers: parse the query, call a tool, shape the response. No SQL and no pixel work here."""

from __future__ import annotations

import asyncio
import os
import stat as stat_module
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from imagesvc import __version__, tools
from imagesvc.errors import NotFound, RangeNotSatisfiable
from imagesvc.search.engine import engine_for
from imagesvc.storage import StoreUnavailable, local_files
from imagesvc.web.app_keys import CALLER, HEALTH_COUNTS, METER, SERVICES
from imagesvc.web.params import QUERY_SCHEMA, accepts, any_query, query_arguments
from imagesvc.web.responses import PublicFile

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
dataset_images = tool_route("list_dataset_images")  # GET /dataset/images: bulk dataset access, keys only
dataset_changes = tool_route("list_dataset_changes")  # GET /dataset/changes: IIIF Change Discovery 1.0


@accepts({"properties": {}})
async def health(request: web.Request, arguments: dict[str, Any]) -> web.Response:
    """Version, storage backend and whether it answers, and catalog counts; 503 when the store is down."""
    services = request.app[SERVICES]
    engine = engine_for(services)
    storage: dict[str, object] = {"backend": services.store.name, "reachable": True}
    try:
        await services.store.ping()
    except StoreUnavailable as exc:
        storage.update(reachable=False, error=exc.message)
    body = {
        "status": "ok" if storage["reachable"] else "degraded",
        "version": __version__,
        "storage": storage,
        "catalog": await request.app[HEALTH_COUNTS].get(services.catalog, await services.db.change_stamp()),
        "search": engine.status(),
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
    files = local_files(services.store)
    if files is None:
        raise NotFound(
            "Images are served by the image host, not by this app, when storage is S3.",
            recovery=[f"Fetch images under {services.settings.image_base}/."],
        )
    try:
        path: Path = files.path_for(f"pub/{relative}")
    except ValueError:
        path = None  # type: ignore[assignment]
    info = await _stat(path) if path is not None else None
    if info is None:
        raise NotFound(f"No public image at /img/{relative}.", recovery=["Take image URLs from GET /books/<id>."])
    _check_range(request, info)
    response = PublicFile(path, headers={"Cache-Control": IMMUTABLE, "Content-Type": "image/jpeg"})
    return response


async def _stat(path: Path) -> os.stat_result | None:
    """The file's status, or None when there is no regular file at ``path``."""

    def stat() -> os.stat_result | None:
        try:
            info = path.stat()
        except (OSError, ValueError):
            return None
        return info if stat_module.S_ISREG(info.st_mode) else None

    return await asyncio.to_thread(stat)


def _check_range(request: web.Request, info: os.stat_result) -> None:
    """Refuse, as a JSON error, a Range that the file response would answer with an empty 416."""
    if "Range" not in request.headers:
        return
    if_range = request.if_range
    if if_range is not None and info.st_mtime > if_range.timestamp():
        return  # the validator is stale: the whole file is sent and the Range ignored
    try:
        start = request.http_range.start
    except ValueError:
        start = info.st_size  # not a single byte range this server can serve
    if start is not None and start >= 0 and start >= info.st_size:
        raise RangeNotSatisfiable(
            f"The range {request.headers['Range']!r} lies outside this {info.st_size}-byte image.",
            recovery=["Ask for a single range within the image's Content-Length, or send no Range."],
            headers={"Content-Range": f"bytes */{info.st_size}"},
        )
