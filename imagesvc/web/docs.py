"""``GET /openapi.json``: an OpenAPI 3.1 document built from the route table, the tool schemas and ``ROUTE_DOCS``.

Every route of ``routes.ROUTES`` appears; a route missing from ``ROUTE_DOCS`` is still documented, from its handler's
docstring and its path parameters, so the document can never silently drop a route.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from imagesvc import __version__, tools
from imagesvc.web.keys import SERVICES

__all__ = [
    "ROUTE_DOCS",
    "RouteDoc",
    "llms_txt",
    "openapi",
    "openapi_document",
    "openapi_path",
    "route_doc",
    "route_parameters",
]

ERROR_REF = {"$ref": "#/components/schemas/Error"}
INTEGER = {"type": "integer", "minimum": 1}


@dataclass(frozen=True)
class RouteDoc:
    """What the route table cannot say about a route: its tool, renamed query parameters, extra ones, its media."""

    summary: str = ""
    tool: str | None = None
    rename: dict[str, str] = field(default_factory=dict)  # tool argument -> query parameter
    params: dict[str, dict[str, Any]] = field(default_factory=dict)  # extra query parameters and their schemas
    media: str = "application/json"
    extra: dict[str, dict[str, Any]] = field(default_factory=dict)  # other documented responses by status


_IMAGE_PARAMS = {
    "book": {"type": "string", "description": "Book id or slug (with page)."},
    "page": {**INTEGER, "description": "Page number (with book)."},
    "illustration": {"type": "string", "description": "Illustration id, instead of book and page."},
    "tier": {"enum": ["full", "display", "thumb"], "default": "display"},
    "clean": {"type": "boolean", "default": False, "description": "Unmarked copy; full-tier keys only."},
}
_GALLERY = {"query": "q", "book_id": "book", "max_per_book": "maxPerBook"}
_JSON_RPC_ERROR = {"type": "object", "required": ["jsonrpc", "error"], "properties": {"error": {"type": "object"}}}

ROUTE_DOCS: dict[tuple[str, str], RouteDoc] = {
    ("GET", "/health"): RouteDoc(extra={"503": {"description": "The object store does not answer."}}),
    ("GET", "/books"): RouteDoc(tool="list_books"),
    ("GET", "/books/library"): RouteDoc(tool="list_books"),
    ("GET", "/books/{book_id}"): RouteDoc(tool="get_book"),
    ("GET", "/books/{book_id}/quote"): RouteDoc(tool="get_quote"),
    ("GET", "/books/{book_id}/text"): RouteDoc(tool="get_book_text"),
    ("GET", "/verify"): RouteDoc("The get_quote tool with the book as a query parameter.", tool="get_quote"),
    ("GET", "/img/{path}"): RouteDoc(media="image/jpeg", extra={"304": {"description": "Not modified."}}),
    ("GET", "/image"): RouteDoc(params=_IMAGE_PARAMS, media="image/jpeg", extra={"304": {"description": "Cached."}}),
    ("GET", "/gallery"): RouteDoc(tool="search_images", rename=_GALLERY),
    ("GET", "/gallery/collections"): RouteDoc(tool="list_collections"),
    ("GET", "/gallery/collections/{slug}"): RouteDoc(tool="get_collection"),
    ("GET", "/gallery/images/{id}"): RouteDoc(tool="get_image"),
    ("GET", "/books/{book_id}/images"): RouteDoc(tool="get_book_images"),
    ("GET", "/vectors/{store}"): RouteDoc(tool="get_vectors"),
    ("GET", "/dataset/v1/usage"): RouteDoc(params={"days": {**INTEGER, "maximum": 90, "default": 30}}),
    ("GET", "/metrics"): RouteDoc("Prometheus metrics (text format 0.0.4).", media="text/plain"),
    ("GET", "/iiif/3/{identifier}/{region}/{size}/{rotation}/{quality_format}"): RouteDoc(
        "IIIF Image API 3.0 (level 2): a region of a page or illustration, scaled, rotated, in a quality and format; "
        "marked unless clean=1 with a full-tier key. Charged to the image budget by delivered area (docs/iiif.md).",
        params={"clean": {"enum": ["0", "1"], "description": "1: unmarked pixels (full and enterprise keys only)."}},
        media="image/*",
        extra={"304": {"description": "Not modified."}},
    ),
    ("GET", "/iiif/3/{identifier}"): RouteDoc(
        "Redirects to the identifier's info.json.", extra={"303": {"description": "See info.json."}}
    ),
    ("GET", "/iiif/3/{identifier}/info.json"): RouteDoc(
        "IIIF Image API 3.0 image information: sizes, tiles, limits, features.", media="application/ld+json"
    ),
    ("POST", "/mcp"): RouteDoc(
        "MCP (JSON-RPC 2.0, Streamable HTTP, stateless): initialize, ping, tools/list, tools/call; one message or "
        "a batch; tool failures are results with isError.",
        extra={
            "202": {"description": "Only notifications were sent."},
            "400": {
                "description": "Unparseable body or unsupported Mcp-Protocol-Version.",
                "content": {"application/json": {"schema": _JSON_RPC_ERROR}},
            },
        },
    ),
    ("GET", "/mcp"): RouteDoc(
        extra={
            "405": {
                "description": "Always: no event stream is offered.",
                "content": {"application/json": {"schema": ERROR_REF}},
            }
        }
    ),
    ("DELETE", "/mcp"): RouteDoc(extra={"204": {"description": "Always: stateless, there is no session to end."}}),
    ("GET", "/llms.txt"): RouteDoc(media="text/plain"),
}


def openapi_path(path: str) -> str:
    """An aiohttp path template as an OpenAPI path: ``{path:.+}`` becomes ``{path}``."""
    return re.sub(r"\{(\w+):[^}]*\}", r"{\1}", path)


def route_doc(method: str, path: str, handler: Any) -> RouteDoc:
    """The route's entry in ``ROUTE_DOCS``, or one derived from its handler's docstring."""
    doc = ROUTE_DOCS.get((method, openapi_path(path)))
    if doc is None:
        doc = RouteDoc()
    if not doc.summary:
        spec = tools.load_all().get(doc.tool or "")
        text = spec.description if spec else (inspect.getdoc(handler) or f"{method} {path}").split("\n\n")[0]
        doc = RouteDoc(" ".join(text.split()), doc.tool, doc.rename, doc.params, doc.media, doc.extra)
    return doc


def route_parameters(path: str, doc: RouteDoc) -> list[dict[str, Any]]:
    spec = tools.load_all().get(doc.tool or "")
    schema = spec.input_schema if spec else {"properties": {}}
    props, required = schema.get("properties", {}), set(schema.get("required", ()))
    out: list[dict[str, Any]] = []
    in_path = re.findall(r"\{(\w+)\}", path)
    for name in in_path:
        out.append({"name": name, "in": "path", "required": True, "schema": props.get(name, {"type": "string"})})
    if path == "/verify":  # the book travels in the query here
        in_path = []
    for arg, prop in props.items():
        if arg in in_path:
            continue
        entry: dict[str, Any] = {"name": doc.rename.get(arg, arg), "in": "query", "schema": prop}
        entry["required"] = arg in required
        if prop.get("type") == "array":
            entry.update(style="form", explode=False)  # pages=1,2,3
        out.append(entry)
    out += [{"name": name, "in": "query", "required": False, "schema": prop} for name, prop in doc.params.items()]
    return out


def _operation(method: str, path: str, handler: Any) -> dict[str, Any]:
    doc = route_doc(method, path, handler)
    spec = tools.load_all().get(doc.tool or "")
    if doc.media == "application/json":
        body = spec.output_schema if spec and spec.output_schema else {"type": ["object", "array"]}
    else:
        body = {"type": "string", "format": "binary"} if doc.media.startswith("image/") else {"type": "string"}
    ok: dict[str, Any] = {"description": "Success.", "content": {doc.media: {"schema": body}}}
    if doc.tool == "get_book_text":
        ok["content"]["text/plain"] = {"schema": {"type": "string"}}  # format=plain
    operation: dict[str, Any] = {
        "operationId": method.lower() + "_" + (re.sub(r"\W+", "_", openapi_path(path)).strip("_") or "root"),
        "summary": doc.summary,
        "parameters": route_parameters(openapi_path(path), doc),
        "responses": {
            "200": ok,
            **doc.extra,
            "default": {"description": "An error.", "content": {"application/json": {"schema": ERROR_REF}}},
        },
    }
    if method == "POST":
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": {}}}}
        operation["responses"]["200"]["content"] = {"application/json": {"schema": {"type": ["object", "array"]}}}
    if doc.tool:
        operation["x-tool"] = doc.tool
    return operation


def openapi_document(routes: Any, base_url: str = "", base_path: str = "") -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``routes`` (``Route`` rows, REST ones under ``base_path``); HEAD is implied by GET.

    Paths are written whole (``/api/books``, ``/iiif/3/...``) against a server at the site root, since the REST routes
    and the site-root routes (IIIF, /img/, /llms.txt) share one document.
    """
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        operation = _operation(route.method, route.path, route.handler)
        paths.setdefault(openapi_path(route.full_path(base_path)), {})[route.method.lower()] = operation
    error = {
        "type": "object",
        "required": ["error", "message", "recovery"],
        "properties": {
            "error": {"type": "string", "description": "Stable code to branch on, e.g. not_found, rate_limited."},
            "message": {"type": "string"},
            "recovery": {"type": "array", "items": {"type": "string"}},
            "request_id": {"type": "string"},
            "retry_after_seconds": {"type": "integer"},
        },
        "additionalProperties": True,
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "imagesvc", "version": __version__, "description": "Full documentation: /llms.txt."},
        "servers": [{"url": base_url or "/"}],
        "security": [{}, {"bearer": []}],
        "paths": paths,
        "components": {
            "schemas": {"Error": error},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "Optional API key."}},
        },
    }


async def openapi(request: web.Request) -> web.Response:
    from imagesvc.web.routes import ROUTES  # the table imports this module

    base_path = request.app[SERVICES].settings.base_path
    return web.json_response(openapi_document(ROUTES, str(request.url.origin()), base_path))


async def llms_txt(request: web.Request) -> web.Response:
    from imagesvc.web.llms import llms_document
    from imagesvc.web.routes import ROUTES

    text = llms_document(ROUTES, str(request.url.origin()), request.app[SERVICES].settings.base_path)
    return web.Response(text=text, content_type="text/plain", charset="utf-8")
