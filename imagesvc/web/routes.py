"""Every HTTP route of imagesvc in one table."""

from __future__ import annotations

from aiohttp import web

from imagesvc.web import images, quota, rest

__all__ = ["ROUTES", "add_routes"]

ROUTES: tuple[tuple[str, str, object], ...] = (
    ("GET", "/health", rest.health),
    ("GET", "/books", rest.books),
    ("GET", "/books/{book_id}", rest.book),
    ("GET", "/img/{path:.+}", rest.public_image),
    ("GET", "/image", images.image),
    ("GET", "/rate_limit", quota.rate_limit),
    ("GET", "/dataset/v1/usage", quota.usage),
)


def add_routes(app: web.Application) -> None:
    for method, path, handler in ROUTES:
        if method == "GET":
            app.router.add_get(path, handler)  # type: ignore[arg-type]  # also answers HEAD
        else:
            app.router.add_route(method, path, handler)  # type: ignore[arg-type]
