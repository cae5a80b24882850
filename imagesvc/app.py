"""``build_app(settings)``: the one place that wires catalog, object store and routes into an aiohttp app."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from imagesvc.access import make_access
from imagesvc.access.identity import CrawlerVerifier, Identifier, Resolver, SystemResolver
from imagesvc.catalog import Catalog
from imagesvc.services import Services, colophon_secret
from imagesvc.storage import make_store
from imagesvc.web.access import access_middleware
from imagesvc.web.keys import ACCESS, IDENTIFIER, SERVICES
from imagesvc.web.middleware import cors_middleware, error_middleware, on_prepare
from imagesvc.web.routes import add_routes

__all__ = ["build_app"]


def build_app(settings: Any, *, resolver: Resolver | None = None) -> web.Application:
    """The application for ``settings``; resources open on startup and close on cleanup.

    ``resolver`` answers the DNS look-ups of crawler verification (the system resolver by default).
    """
    resolver = resolver or SystemResolver()
    app = web.Application(middlewares=[cors_middleware, error_middleware, access_middleware])
    app.on_response_prepare.append(on_prepare)

    async def services_ctx(app: web.Application) -> AsyncIterator[None]:
        catalog = Catalog(settings.data_dir / "catalog.sqlite3")
        store = make_store(settings)
        app[SERVICES] = Services(settings, catalog, store, colophon_secret(settings))
        app[IDENTIFIER] = Identifier(settings, catalog, CrawlerVerifier(settings.crawler_domains, resolver))
        try:
            yield
        finally:
            await store.close()
            catalog.close()

    async def access_ctx(app: web.Application) -> AsyncIterator[None]:
        app[ACCESS] = access = make_access(settings)
        try:
            yield
        finally:
            await access.close()

    app.cleanup_ctx.extend([services_ctx, access_ctx])
    add_routes(app)
    return app
