"""``build_app(settings)``: the one place that wires catalog, object store and routes into an aiohttp app."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from aiohttp import web

from imagesvc.access import make_access
from imagesvc.access.identity import CrawlerVerifier, Identifier, Resolver, SystemResolver
from imagesvc.catalog.backends import open_catalog
from imagesvc.observability import MeteredStore, Metrics
from imagesvc.pages import html_error_middleware, setup_pages
from imagesvc.services import Services, colophon_secret
from imagesvc.settings import Settings
from imagesvc.storage import make_store
from imagesvc.storage.hot import HotObjects
from imagesvc.web.access import access_middleware
from imagesvc.web.allocator import return_large_blocks
from imagesvc.web.app_keys import ACCESS, HEALTH_COUNTS, IDENTIFIER, IIIF, METRICS, SERVICES
from imagesvc.web.health_counts import CatalogCounts
from imagesvc.web.metrics import observe_middleware, rejections_middleware
from imagesvc.web.middleware import (
    MAX_BODY_BYTES,
    body_deadline_middleware,
    cors_middleware,
    error_middleware,
    on_prepare,
)
from imagesvc.web.routes import add_routes

__all__ = ["build_app", "build_serving_app"]


def build_app(settings: Settings, *, resolver: Resolver | None = None) -> web.Application:
    """The application for ``settings``; resources open on startup and close on cleanup.

    ``resolver`` answers the DNS look-ups of crawler verification (the system resolver by default).
    """
    return_large_blocks()  # a burst of image-sized buffers is given back to the system once freed
    resolver = resolver or SystemResolver()
    # observe is outermost so it sees every final status; rejections sits inside error to see 429s as errors;
    # html_error renders the errors of pages for people (the JSON shape stays for everything else); body_deadline
    # counts a body's read deadline from before the caller is identified, and its 408 is rendered by the two above.
    # Requests aiohttp's HTTP protocol cannot read (a line or header over 8,190 bytes, broken framing) never reach a
    # middleware: aiohttp answers them with a plain-text 400; the proxy in front answers them in the JSON shape
    # (docker/nginx.conf, docs/operations.md).
    metrics = Metrics(settings.data_dir)
    app = web.Application(
        middlewares=[
            observe_middleware,
            cors_middleware,
            error_middleware,
            body_deadline_middleware,
            html_error_middleware,
            rejections_middleware,
            access_middleware,
        ],
        client_max_size=MAX_BODY_BYTES,
    )
    app[METRICS] = metrics
    app[HEALTH_COUNTS] = CatalogCounts()
    app.on_response_prepare.append(on_prepare)

    async def services_ctx(app: web.Application) -> AsyncIterator[None]:
        catalog = open_catalog(settings, serving=True)
        store = HotObjects(MeteredStore(make_store(settings), app[METRICS].store_errors), settings.hot_cache_bytes)
        app[METRICS].watch_hot_objects(store)
        app[SERVICES] = services = Services(settings, catalog, store, colophon_secret(settings))
        # Keys are looked up in the catalog the request pinned (a snapshot, when the node follows them).
        verifier = CrawlerVerifier(settings.crawler_domains, resolver)
        app[IDENTIFIER] = Identifier(settings, lambda: services.catalog, verifier)
        try:
            yield
        finally:
            await store.close()
            catalog.close()
            if isinstance(resolver, SystemResolver):  # look-ups still in c-ares end now, not on a closed loop
                resolver.close()

    async def access_ctx(app: web.Application) -> AsyncIterator[None]:
        app[ACCESS] = access = make_access(settings)
        try:
            yield
        finally:
            await access.close()

    async def search_ctx(app: web.Application) -> AsyncIterator[None]:
        # Cheap: the model and the search snapshot load on the first query that needs them (in worker threads).
        from imagesvc.search.engine import engine_for

        engine = engine_for(app[SERVICES])
        logging.getLogger("imagesvc.search").info("gallery search: CLIP %s", engine.spec.describe())
        yield

    app.cleanup_ctx.extend([services_ctx, access_ctx])
    app.cleanup_ctx.append(search_ctx)
    if settings.snapshot_prefix:
        # Follow published catalog snapshots (docs/operations.md); the middleware goes first so that everything a
        # request reads, the caller's key included, comes from one snapshot.
        from imagesvc.web.follow import snapshot_ctx, snapshot_middleware

        app.middlewares.insert(0, snapshot_middleware)
        app.cleanup_ctx.append(snapshot_ctx)

    async def iiif_ctx(app: web.Application) -> AsyncIterator[None]:
        # Threads suffice for IIIF pixel work: Pillow releases the GIL while it decodes, resamples and encodes.
        from concurrent.futures import ThreadPoolExecutor

        from imagesvc.iiif.cache import DerivativeCache
        from imagesvc.iiif.delivery import IiifRuntime
        from imagesvc.iiif.image_api import Limits

        pool = ThreadPoolExecutor(max_workers=settings.workers, thread_name_prefix="iiif")
        limits = Limits(settings.iiif_max_width, settings.iiif_max_width, settings.iiif_max_area)
        app[IIIF] = IiifRuntime(pool, DerivativeCache(app[SERVICES].store, settings.iiif_cache_bytes), limits)
        try:
            yield
        finally:
            await app[IIIF].cache.close()
            pool.shutdown(wait=False, cancel_futures=True)

    app.cleanup_ctx.append(iiif_ctx)
    add_routes(app, settings.base_path)
    setup_pages(app, settings)
    return app


def build_serving_app(settings: Settings) -> web.Application:
    """``build_app`` with what a serving process adds: search warm-up, the drain log line, its own thread pool."""
    from imagesvc.web.lifecycle import add_serving_hooks

    app = build_app(settings)
    add_serving_hooks(app, settings)
    return app
