"""Gallery pages: search (``/``), one illustration, and the curated collections, each over the gallery tools.

The search form is generated from the ``search_images`` schema and uses the query-parameter names of ``GET /gallery``
(``q``, ``book``, ...), so a page URL and an API URL take the same query and a result page can be shared as a link.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from imagesvc import tools
from imagesvc.errors import InvalidRequest, NotFound
from imagesvc.pages.render import render
from imagesvc.surface.arguments import ALIASES, canonical
from imagesvc.tools.image_search import upload_limit
from imagesvc.tools.image_work import image_work
from imagesvc.web.app_keys import SERVICES
from imagesvc.web.image_search import FORM, as_tool_arguments
from imagesvc.web.params import QUERY_SCHEMA, declare_body, query_arguments, route_name
from imagesvc.web.rest import tool_call
from imagesvc.web.uploads import upload_arguments

__all__ = [
    "CHOICES",
    "FILTERS",
    "by_image",
    "by_image_form",
    "collection",
    "collections",
    "form_fields",
    "home",
    "illustration",
    "search_args",
    "upload_form",
]

# The filters a person sets, in form order; each is a search_images argument. Paging and ranking arguments
# (offset, limit, max_per_book, min_score, like) travel in the URL too but get no input of their own.
FILTERS = ("query", "type", "subject", "figure", "symbol", "year_from", "year_to", "book_id", "collection")
LABELS = {
    "query": "What the picture shows",
    "type": "Type",
    "subject": "Subject",
    "figure": "Figure",
    "symbol": "Symbol",
    "year_from": "From year",
    "year_to": "To year",
    "book_id": "Book",
    "collection": "Collection",
}
# Upload search (an image as the query) arrives with the search issue: when search_images takes an image argument,
# an image is never carried in a URL: search by image is its own form, posting to /search-by-image.
UPLOAD_ARGUMENT = "image"
WHOLE_BOOK = 1000  # maxPerBook for a listing of one book, or of every picture of every book


def _schema() -> dict[str, Any]:
    return tools.load_all()["search_images"].input_schema["properties"]


def _rename() -> dict[str, str]:
    """search_images argument -> the name the form sends: its shortest accepted name (``q``, ``book``, ``maxPerBook``),
    all of which GET /api/gallery takes too."""
    return {arg: min([arg, *prop.get(ALIASES, [])], key=len) for arg, prop in _schema().items()}


def search_args(request: web.Request) -> dict[str, Any]:
    """The search_images arguments in the query string, read through the tool's own schema (names, aliases, types);
    an empty form field counts as absent. Values are checked by the tool itself."""
    schema = tools.load_all()["search_images"].input_schema
    args = canonical(route_name(request), schema, query_arguments(request, schema))
    args.pop(UPLOAD_ARGUMENT, None)  # an image is uploaded, never carried in a URL
    return {k: v.strip() if isinstance(v, str) else v for k, v in args.items() if v not in (None, "")}


def form_fields(args: dict[str, Any], choices: dict[str, list[tuple[str, str]]]) -> list[dict[str, Any]]:
    """One input per filter, from the schema: name, label, kind (text, number, select), bounds and current value."""
    schema, rename, out = _schema(), _rename(), []
    for arg in FILTERS:
        prop = schema[arg]
        field = {"arg": arg, "name": rename.get(arg, arg), "label": LABELS[arg], "value": args.get(arg, "")}
        if arg in choices:
            field.update(kind="select", options=choices[arg])
        elif prop.get("type") == "integer":
            field.update(kind="number", min=prop.get("minimum"), max=prop.get("maximum"))
        else:
            field.update(kind="search" if arg == "query" else "text", maxlength=prop.get("maxLength"))
        out.append(field)
    return out


def _with(request: web.Request, **changes: Any) -> str:
    """This page's URL with ``changes`` to its query (and from the first result again)."""
    query = {k: v for k, v in request.query.items() if v != "" and k != "offset"} | {
        k: str(v) for k, v in changes.items()
    }
    return str(request.rel_url.with_query(query))


def _page_link(request: web.Request, offset: int) -> str:
    query = {k: v for k, v in request.query.items() if v != "" and k != "offset"}
    if offset:
        query["offset"] = str(offset)
    return str(request.rel_url.with_query(query))


CHOICES_SECONDS = 30.0
CHOICES = web.AppKey("pages_choices", dict)


async def _choices(request: web.Request) -> dict[str, list[tuple[str, str]]]:
    """The book and collection menus of the form, from list_books and list_collections. They are the same for every
    caller and change only with an ingest, so each process keeps them for CHOICES_SECONDS (a new book may take that
    long to appear in the menu; it is searchable at once)."""
    held = request.app[CHOICES]  # a dict made by setup_pages: the app itself is frozen once it serves
    now = time.monotonic()
    if held and held["until"] > now:
        return held["choices"]  # type: ignore[no-any-return]
    services, call = request.app[SERVICES], tool_call(request)
    books = await tools.call(services, "list_books", {"limit": 200}, call)
    sets = await tools.call(services, "list_collections", {}, call)
    choices = {
        "book_id": [(b["slug"], b["title"]) for b in books["items"]],
        "collection": [(c["slug"], c["title"]) for c in sets["items"]],
    }
    held.update(until=now + CHOICES_SECONDS, choices=choices)
    return choices


async def home(request: web.Request) -> web.Response:
    """``GET /``: gallery search with filters, a grid of results, paging; the URL holds the whole query."""
    services, call = request.app[SERVICES], tool_call(request)
    args = search_args(request)
    asked = dict(args)
    if "book_id" in args and "maxPerBook" not in args:
        args["maxPerBook"] = WHOLE_BOOK  # a Book filter shows that book's pictures, not the first few
    result = await tools.call(services, "search_images", args, call)
    choices = await _choices(request)
    offset, limit = result["offset"], result["limit"]
    capped = "maxPerBook" not in args and not args.get("like")
    context = {
        "title": "Search the illustrations",
        "fields": form_fields(asked, choices),
        "more_filters": any(k in asked for k in FILTERS if k != "query"),
        "per_book": _schema()["maxPerBook"]["default"] if capped else None,
        "all_per_book_link": _with(request, maxPerBook=WHOLE_BOOK) if capped else None,
        "upload": upload_form({}, choices),
        "args": args,
        "result": result,
        "like": args.get("like"),
        "clip": "clip" in (result["search"].get("signals") or []),
        "prev_link": _page_link(request, max(0, offset - limit)) if offset > 0 else None,
        "next_link": _page_link(request, offset + limit) if result["has_more"] else None,
        "first": offset + 1,
        "last": offset + len(result["items"]),
    }
    return render(request, "gallery.html", context)


setattr(home, QUERY_SCHEMA, tools.load_all()["search_images"].input_schema)  # the form's parameters are the tool's


async def illustration(request: web.Request) -> web.Response:
    """``GET /illustration/{id}``: one gallery entry (get_image) and, with CLIP on, pictures like it."""
    services, call = request.app[SERVICES], tool_call(request)
    item = await tools.call(services, "get_image", {"id": request.match_info["id"]}, call)
    similar: list[dict[str, Any]] = []
    try:
        found = await tools.call(services, "search_images", {"like": item["id"], "limit": 8}, call)
    except NotFound:
        found = None  # no image embedding (CLIP off or not indexed yet): nothing to rank by likeness
    if found is not None:
        similar = [i for i in found["items"] if i["id"] != item["id"]]
    context = {"title": item["description"] or item["id"], "item": item, "similar": similar, "clip": found is not None}
    return render(request, "illustration.html", context)


async def collections(request: web.Request) -> web.Response:
    """``GET /collections``: the curated sets with their covers and counts."""
    result = await tools.call(request.app[SERVICES], "list_collections", {}, tool_call(request))
    return render(request, "collections.html", {"title": "Collections", "collections": result["items"]})


async def collection(request: web.Request) -> web.Response:
    """``GET /collections/{slug}``: one set with all its pictures."""
    args = {"slug": request.match_info["slug"]}
    result = await tools.call(request.app[SERVICES], "get_collection", args, tool_call(request))
    return render(request, "collection.html", {"title": result["title"], "collection": result})


async def by_image(request: web.Request) -> web.Response:
    """``POST /search-by-image``: the picture from the form's file field and the form's other fields (book_id,
    limit: the search_images_by_image tool's arguments) -> the printings of the same woodblock (and, with CLIP,
    similar pictures) as cards. The form is read within the upload bounds of the REST route (web.uploads); every
    error, a malformed form included, is an HTML page."""
    services, call = request.app[SERVICES], tool_call(request)
    async with image_work(services).caller_slot(call.caller.subject):  # taken before the upload is read
        args = await upload_arguments(request, upload_limit(services), FORM, forms=("multipart",))
        if not args.get("image"):
            raise InvalidRequest("No picture was sent.", recovery=["Choose an image file, then press Search by image."])
        args.setdefault("limit", 20)
        result = await tools.call(services, "search_images_by_image", as_tool_arguments(args), call)
    context = await _by_image_context(request, args, result)
    return render(request, "by_image.html", context)


async def by_image_form(request: web.Request) -> web.Response:
    """``GET /search-by-image``: the upload form on a page of its own (where a reload of a result page lands)."""
    return render(request, "by_image.html", await _by_image_context(request, {"limit": 20}, None))


async def _by_image_context(request: web.Request, args: dict[str, Any], result: Any) -> dict[str, Any]:
    choices = await _choices(request)
    return {
        "title": "Search by image",
        "result": result,
        "clip": result is not None and result["similar"] is not None,
        "upload": upload_form(args, choices),
    }


def upload_form(args: dict[str, Any], choices: dict[str, list[tuple[str, str]]]) -> dict[str, Any]:
    """The upload form's fields: the search_images_by_image arguments a person sets (the picture, a book, how many),
    from the tool's schema, so the form and the API take the same names and bounds."""
    props = tools.load_all()["search_images_by_image"].input_schema["properties"]
    limit = props["limit"]
    return {
        "books": choices.get("book_id", []),
        "book_id": args.get("book_id") or "",
        "limit": args.get("limit", limit["default"]),
        "limit_min": limit["minimum"],
        "limit_max": limit["maximum"],
    }


declare_body(by_image, {"multipart/form-data": FORM})
