"""Errors on the pages render as an HTML page for a person, with the status and headers the API would send.

API routes keep the one JSON error shape: this middleware only handles requests whose route is a page, and a miss
outside the API, IIIF and the image host from a browser (one that accepts text/html).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from imagesvc.errors import ImagesvcError, NotFound
from imagesvc.pages.render import render
from imagesvc.web.app_keys import REQUEST_ID, SERVICES

__all__ = ["PAGE_HANDLERS", "html_error_middleware", "is_page"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PAGE_HANDLERS: set[object] = set()  # filled by imagesvc.pages with its page handlers (not the asset routes)
_MACHINE_PREFIXES = ("/iiif/", "/img/", "/static/", "/viewer/")

TITLES = {400: "That request cannot be read", 404: "Not found", 429: "Please wait a little", 503: "Try again soon"}


def is_page(request: web.Request) -> bool:
    """Whether ``request`` is for a page for people (a route of ``PAGE_HANDLERS``, not the pages' files)."""
    route = request.match_info.route
    handler = getattr(route, "handler", None)
    # Routes hold the handler as the parameter checks wrapped it (web.params.strict/accepts/text_only): compare each
    # layer down to what is inside.
    while handler is not None:
        if handler in PAGE_HANDLERS:
            return True
        handler = getattr(handler, "__wrapped__", None)
    return False


def _browser_miss(request: web.Request) -> bool:
    base = request.app[SERVICES].settings.base_path
    path = request.path
    if (base and (path == base or path.startswith(base + "/"))) or path.startswith(_MACHINE_PREFIXES):
        return False
    return "text/html" in request.headers.get("Accept", "")


def render_error(request: web.Request, error: ImagesvcError) -> web.Response:
    settings = request.app[SERVICES].settings
    slug = request.match_info.get("slug")
    context = {
        "title": TITLES.get(error.status, "Something went wrong"),
        "error": error,
        "request_id": request.get(REQUEST_ID, "-"),
        # A page out of range still names a real book: offer its first page and its book page.
        "book_slug": slug if slug and "first_page" in error.details else None,
        "first_page": error.details.get("first_page"),
        "links": {"sign_in": settings.sign_in_url, "get_free_key": settings.keys_url},
    }
    return render(request, "error.html", context, status=error.status, headers=error.headers)


@web.middleware
async def html_error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Inside the JSON error middleware: page errors become HTML; everything else passes through untouched."""
    try:
        return await handler(request)
    except ImagesvcError as exc:
        if not is_page(request):
            raise
        return render_error(request, exc)
    except web.HTTPNotFound:
        if not _browser_miss(request):
            raise
        return render_error(request, NotFound(f"There is no page at {request.path}."))
