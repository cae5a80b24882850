"""Every HTTP route of imagesvc in one table, and where each is mounted.

The REST routes and ``/mcp`` live under the base path (``IMAGESVC_BASE_PATH``, ``/api`` by default: the spec's
``{base_url}``). ``/llms.txt``, IIIF, the embedded image host and the operator's ``/health`` and ``/metrics`` stay at
the site root, where viewers, CDNs and probes expect them.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from imagesvc.pages import assets as page_assets
from imagesvc.pages import catalogue as page_catalogue
from imagesvc.pages import illustrations as page_illustrations
from imagesvc.pages import reading as page_reading
from imagesvc.web import archive, docs, gallery, iiif, image_search, images, mcp, metrics, probes, quota, rest, text
from imagesvc.web.params import check_declared, strict, text_only

__all__ = ["API", "ROUTES", "SITE", "Route", "add_routes", "mounted"]

API = "api"  # under the base path
SITE = "site"  # at the site root


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # relative to its mount
    handler: object
    mount: str = API

    def full_path(self, base_path: str) -> str:
        """The path this route answers on for ``base_path`` (e.g. ``/api``)."""
        return (base_path + self.path) if self.mount == API else self.path


ROUTES: tuple[Route, ...] = (
    Route("GET", "/health", rest.health, SITE),
    Route("GET", "/health/live", probes.live, SITE),
    Route("GET", "/health/ready", probes.ready, SITE),
    Route("GET", "/metrics", metrics.metrics, SITE),
    Route("GET", "/llms.txt", docs.llms_txt, SITE),
    Route("GET", "/img/{path:.+}", rest.public_image, SITE),
    Route("GET", "/iiif/3/manifest/{book_id}", iiif.manifest, SITE),
    Route("GET", "/iiif/3/collections", iiif.collections, SITE),
    Route("GET", "/iiif/3/collection/{slug}", iiif.collection, SITE),
    Route("GET", "/iiif/3/{identifier}", iiif.base_redirect, SITE),
    Route("GET", "/iiif/3/{identifier}/info.json", iiif.info, SITE),
    Route("GET", "/iiif/3/{identifier}/{region}/{size}/{rotation}/{quality_format}", iiif.image, SITE),
    Route("GET", "/books", rest.books),
    Route("GET", "/books/library", rest.library),  # before /books/{book_id}, which would take "library" as an id
    Route("GET", "/books/{book_id}", rest.book),
    Route("GET", "/books/{book_id}/quote", text.quote),
    Route("GET", "/books/{book_id}/text", text.book_text),
    Route("GET", "/books/{book_id}/archive", archive.archive),
    Route("GET", "/books/{book_id}/search", text.search),
    Route("GET", "/verify", text.verify),
    Route("GET", "/image", images.image),
    Route("GET", "/gallery", gallery.gallery),
    Route("POST", "/gallery/search-by-image", image_search.search_by_image),
    Route("GET", "/gallery/collections", gallery.collections),
    Route("GET", "/gallery/collections/{slug}", gallery.collection),
    Route("GET", "/gallery/images/{id}", gallery.image),
    Route("GET", "/books/{book_id}/images", gallery.book_images),
    Route("GET", "/vectors/{store}", gallery.vectors),
    Route("GET", "/rate_limit", quota.rate_limit),
    Route("GET", "/dataset/v1/usage", quota.usage),
    Route("GET", "/dataset/images", rest.dataset_images),
    Route("GET", "/dataset/changes", rest.dataset_changes),
    Route("POST", "/mcp", mcp.mcp_post),
    Route("GET", "/mcp", mcp.mcp_get),
    Route("DELETE", "/mcp", mcp.mcp_delete),
    Route("GET", "/openapi.json", docs.openapi),
    # Pages for people (imagesvc/pages): the site root, the citation URLs, and the files the pages load.
    Route("GET", "/", page_illustrations.home, SITE),
    Route("GET", "/search-by-image", page_illustrations.by_image_form, SITE),
    Route("POST", "/search-by-image", page_illustrations.by_image, SITE),
    Route("GET", "/illustration/{id}", page_illustrations.illustration, SITE),
    Route("GET", "/collections", page_illustrations.collections, SITE),
    Route("GET", "/collections/{slug}", page_illustrations.collection, SITE),
    Route("GET", "/book/{slug}", page_reading.book, SITE),
    Route("GET", "/catalogue", page_catalogue.catalogue, SITE),
    Route("GET", "/static/{path:.+}", page_assets.static, SITE),
    Route("GET", "/viewer/{path:.+}", page_assets.viewer, SITE),
)


def mounted(base_path: str) -> list[tuple[str, str, object]]:
    """``(method, full path, handler)`` for every route, with API routes under ``base_path``."""
    return [(route.method, route.full_path(base_path), route.handler) for route in ROUTES]


def add_routes(app: web.Application, base_path: str) -> None:
    """Mount every route; a handler that reads parameters it does not declare stops the start-up
    (``params.UndeclaredParameters``), before it could answer "Accepted: none" to a documented parameter."""
    for method, path, handler in mounted(base_path):
        check_declared(handler, f"{method} {path}")
        handler = strict(handler)  # type: ignore[arg-type]  # a route that declares no query parameters takes none
        handler = text_only(handler)  # no path segment or query value holds NUL: a 400 naming it
        if method == "GET":
            app.router.add_get(path, handler)  # type: ignore[arg-type]  # also answers HEAD
        else:
            app.router.add_route(method, path, handler)  # type: ignore[arg-type]
