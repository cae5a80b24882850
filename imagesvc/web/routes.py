"""Every HTTP route of imagesvc in one table."""

from __future__ import annotations

from aiohttp import web

from imagesvc.web import docs, gallery, iiif, images, mcp, metrics, quota, rest, text

__all__ = ["ROUTES", "add_routes"]

ROUTES: tuple[tuple[str, str, object], ...] = (
    ("GET", "/health", rest.health),
    ("GET", "/metrics", metrics.metrics),
    ("GET", "/books", rest.books),
    ("GET", "/books/{book_id}", rest.book),
    ("GET", "/books/{book_id}/quote", text.quote),
    ("GET", "/books/{book_id}/text", text.book_text),
    ("GET", "/verify", text.verify),
    ("GET", "/img/{path:.+}", rest.public_image),
    ("GET", "/image", images.image),
    ("GET", "/gallery", gallery.gallery),
    ("GET", "/gallery/collections", gallery.collections),
    ("GET", "/gallery/collections/{slug}", gallery.collection),
    ("GET", "/gallery/images/{id}", gallery.image),
    ("GET", "/books/{book_id}/images", gallery.book_images),
    ("GET", "/vectors/{store}", gallery.vectors),
    ("GET", "/rate_limit", quota.rate_limit),
    ("GET", "/dataset/v1/usage", quota.usage),
    ("POST", "/mcp", mcp.mcp_post),
    ("GET", "/mcp", mcp.mcp_get),
    ("DELETE", "/mcp", mcp.mcp_delete),
    ("GET", "/iiif/3/manifest/{book_id}", iiif.manifest),
    ("GET", "/iiif/3/collections", iiif.collections),
    ("GET", "/iiif/3/collection/{slug}", iiif.collection),
    ("GET", "/iiif/3/{identifier}", iiif.base_redirect),
    ("GET", "/iiif/3/{identifier}/info.json", iiif.info),
    ("GET", "/iiif/3/{identifier}/{region}/{size}/{rotation}/{quality_format}", iiif.image),
    ("GET", "/openapi.json", docs.openapi),
    ("GET", "/llms.txt", docs.llms_txt),
)


def add_routes(app: web.Application) -> None:
    for method, path, handler in ROUTES:
        if method == "GET":
            app.router.add_get(path, handler)  # type: ignore[arg-type]  # also answers HEAD
        else:
            app.router.add_route(method, path, handler)  # type: ignore[arg-type]
