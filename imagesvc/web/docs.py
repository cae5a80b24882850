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
from imagesvc.surface.arguments import ALIASES
from imagesvc.web.app_keys import SERVICES
from imagesvc.web.params import NONE, body_schema, query_schema
from imagesvc.web.rest import TOOL

__all__ = [
    "ROUTE_DOCS",
    "RouteDoc",
    "llms_txt",
    "openapi",
    "openapi_document",
    "openapi_path",
    "route_doc",
    "route_parameters",
    "route_tool",
]

ERROR_REF = {"$ref": "#/components/schemas/Error"}


@dataclass(frozen=True)
class RouteDoc:
    """What the handler cannot say about a route: a summary, its media type, other documented responses.

    Its parameters are never written here: they are the query schema the handler declares (``params.accepts``, or
    the tool's input schema for ``rest.tool_route``), the same one that parses requests.
    """

    summary: str = ""
    media: str = "application/json"
    extra: dict[str, dict[str, Any]] = field(default_factory=dict)  # other documented responses by status


_HTML = {"text/html": {"schema": {"type": "string"}}}
# Pages for people answer HTML, their errors included (imagesvc/pages); the JSON error shape stays for the API.
_PAGE_ERRORS = {
    str(status): {"description": f"{what}, as an HTML page.", "content": _HTML}
    for status, what in ((400, "A bad parameter"), (404, "Unknown book, page or id"), (429, "A limit reached"))
}
# ... and the upload page's own refusals (imagesvc/web/uploads.py), which people see as pages too
_UPLOAD_PAGE_ERRORS = _PAGE_ERRORS | {
    str(status): {"description": f"{what}, as an HTML page.", "content": _HTML}
    for status, what in (
        (408, "The upload did not arrive in time"),
        (413, "The upload is over its limit"),
        (415, "A compressed or unsupported body"),
        (422, "A file that is not a usable image"),
        (503, "Searches by image are full or the service is degraded"),
    )
}
_JSON_RPC_ERROR = {"type": "object", "required": ["jsonrpc", "error"], "properties": {"error": {"type": "object"}}}

ROUTE_DOCS: dict[tuple[str, str], RouteDoc] = {
    ("GET", "/health"): RouteDoc(
        extra={"503": {"description": "The object store does not answer, or the catalog not within its deadline."}}
    ),
    ("GET", "/health/live"): RouteDoc(
        "Liveness: the process runs. Always 200 at once; asks no dependency (restart a node only on this)."
    ),
    ("GET", "/health/ready"): RouteDoc(
        "Readiness: 200 when the catalog, the access backend and the object store answer within the catalog "
        "deadline and the search warm-up has finished; route traffic to a node only on this.",
        extra={"503": {"description": "Not ready: down names what does not answer (catalog, access, store, search)."}},
    ),
    ("GET", "/img/{path}"): RouteDoc(media="image/jpeg", extra={"304": {"description": "Not modified."}}),
    ("GET", "/image"): RouteDoc(media="image/jpeg", extra={"304": {"description": "Cached."}}),
    ("GET", "/metrics"): RouteDoc("Prometheus metrics (text format 0.0.4).", media="text/plain"),
    ("GET", "/iiif/3/{identifier}/{region}/{size}/{rotation}/{quality_format}"): RouteDoc(
        "IIIF Image API 3.0 (level 2): a region of a page or illustration, scaled, rotated, in a quality and format; "
        "marked unless clean=1 with a full-tier key. Charged to the image budget by delivered area (docs/iiif.md).",
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
    ("GET", "/"): RouteDoc(
        "Gallery search page for people (HTML): the search_images tool with a form; same parameters as /gallery.",
        media="text/html",
        extra=_PAGE_ERRORS,
    ),
    ("POST", "/search-by-image"): RouteDoc(
        "Search by image for people (HTML): a picture from a form's file field (multipart) with the form's book_id "
        "and limit, the printings of the same woodblock as cards; the search_images_by_image tool.",
        media="text/html",
        extra=_UPLOAD_PAGE_ERRORS,
    ),
    ("GET", "/search-by-image"): RouteDoc(
        "The search-by-image upload form for people (HTML).", media="text/html", extra=_PAGE_ERRORS
    ),
    ("GET", "/illustration/{id}"): RouteDoc(
        "One illustration's page for people (HTML), with pictures like it.", media="text/html", extra=_PAGE_ERRORS
    ),
    ("GET", "/collections"): RouteDoc("Curated collections, for people (HTML).", media="text/html"),
    ("GET", "/collections/{slug}"): RouteDoc(
        "One curated collection, for people (HTML).", media="text/html", extra=_PAGE_ERRORS
    ),
    ("GET", "/book/{slug}"): RouteDoc(
        "A book's page for people (HTML); with page=N the page that citation URLs open: the image in a deep-zoom "
        "viewer, its text and citations. Costs what the get_quote tool costs.",
        media="text/html",
        extra=_PAGE_ERRORS,
    ),
    ("GET", "/static/{path}"): RouteDoc("The pages' stylesheet and script; counts nothing.", media="text/css"),
    ("GET", "/viewer/{path}"): RouteDoc(
        "The reading page's deep-zoom viewer (OpenSeadragon, installed at set-up); counts nothing.",
        media="text/javascript",
    ),
}


def openapi_path(path: str) -> str:
    """An aiohttp path template as an OpenAPI path: ``{path:.+}`` becomes ``{path}``."""
    return re.sub(r"\{(\w+):[^}]*\}", r"{\1}", path)


def route_tool(handler: Any) -> str | None:
    """The tool a route's handler calls (``rest.tool_route``), if any."""
    return getattr(handler, TOOL, None)


def route_doc(method: str, path: str, handler: Any) -> RouteDoc:
    """The route's entry in ``ROUTE_DOCS``, with a summary from its tool or handler docstring when it has none."""
    doc = ROUTE_DOCS.get((method, openapi_path(path))) or RouteDoc()
    if not doc.summary:
        spec = tools.load_all().get(route_tool(handler) or "")
        text = (inspect.getdoc(handler) or (spec.description if spec else "") or f"{method} {path}").split("\n\n")[0]
        doc = RouteDoc(" ".join(text.split()), doc.media, doc.extra)
    return doc


def _describe(prop: dict[str, Any]) -> dict[str, Any]:
    """A property as an OpenAPI parameter schema; aliases go into the description, where a person reads them."""
    schema = {k: v for k, v in prop.items() if k != ALIASES}
    aliases = prop.get(ALIASES)
    if aliases:
        also = f"Also accepted as {', '.join(aliases)}."
        schema["description"] = f"{schema['description']} {also}" if schema.get("description") else also
    return schema


def route_parameters(path: str, handler: Any) -> list[dict[str, Any]]:
    """The route's path parameters and its declared query parameters, as OpenAPI parameter objects."""
    schema = query_schema(handler)
    if schema is None:
        schema = NONE
    props, required = schema.get("properties", {}), set(schema.get("required", ()))
    out: list[dict[str, Any]] = []
    in_path = re.findall(r"\{(\w+)\}", path)
    for name in in_path:
        prop = _describe(props.get(name, {"type": "string"}))
        out.append({"name": name, "in": "path", "required": True, "schema": prop})
    for name, prop in props.items():
        if name in in_path:
            continue
        entry: dict[str, Any] = {"name": name, "in": "query", "required": name in required, "schema": _describe(prop)}
        if prop.get("type") == "array":
            entry.update(style="form", explode=False)  # pages=1,2,3 (a repeated parameter is accepted too)
        out.append(entry)
    return out


def _operation(method: str, path: str, handler: Any) -> dict[str, Any]:
    doc = route_doc(method, path, handler)
    tool = route_tool(handler)
    spec = tools.load_all().get(tool or "")
    if doc.media == "application/json":
        body = spec.output_schema if spec and spec.output_schema else {"type": ["object", "array"]}
    else:
        body = {"type": "string", "format": "binary"} if doc.media.startswith("image/") else {"type": "string"}
    ok: dict[str, Any] = {"description": "Success.", "content": {doc.media: {"schema": body}}}
    if tool == "get_book_text":
        ok["content"]["text/plain"] = {"schema": {"type": "string"}}  # format=plain
    operation: dict[str, Any] = {
        "operationId": method.lower() + "_" + (re.sub(r"\W+", "_", openapi_path(path)).strip("_") or "root"),
        "summary": doc.summary,
        "parameters": route_parameters(openapi_path(path), handler),
        "responses": {
            "200": ok,
            **doc.extra,
            "default": {"description": "An error.", "content": {"application/json": {"schema": ERROR_REF}}},
        },
    }
    if method == "POST":
        declared = body_schema(handler)
        content = {m: {"schema": s} for m, s in declared.items()} if declared else {"application/json": {"schema": {}}}
        operation["requestBody"] = {"required": True, "content": content}
        if doc.media == "application/json":
            operation["responses"]["200"]["content"] = {"application/json": {"schema": body}}
    if tool:
        operation["x-tool"] = tool
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
