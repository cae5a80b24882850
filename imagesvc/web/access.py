"""The access middleware: identify the caller, count the request, and settle budgets once delivery is known.

Responses are sent from inside this middleware (``prepare`` + ``write_eof``) so that a reservation is committed only
once the client acknowledged the whole body (``web.wire``), and refunded on an error, a 304, or a client that went
away or stalled before the end of the body.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web

from imagesvc.access import Allowed
from imagesvc.access.headers import rate_headers, rate_limited
from imagesvc.access.ledger import Ledger
from imagesvc.access.meter import Meter
from imagesvc.errors import Unauthorized
from imagesvc.pages.errors import is_page
from imagesvc.web.app_keys import (
    ACCESS,
    CALLER,
    IDENTIFIER,
    KEEPER,
    LEDGER,
    METER,
    RATE_HEADERS,
    REQUEST_DENIED,
    SERVICES,
    WIRE,
)
from imagesvc.web.responses import KeptResponse
from imagesvc.web.wire import Keeper, Wire

__all__ = ["UNCOUNTED_API_PATHS", "UNCOUNTED_SITE_PATHS", "access_middleware"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Free routes: they count against nothing (the quota endpoint must not spend what it reports).
UNCOUNTED_SITE_PATHS = frozenset({"/health", "/health/live", "/health/ready", "/llms.txt", "/metrics"})
UNCOUNTED_API_PATHS = frozenset({"/rate_limit", "/openapi.json"})  # under the base path

# Deep zoom asks for dozens of tiles a screen: IIIF requests are not held to the request limit; each one is charged
# to the image budget by the pixel area it delivers instead (docs/iiif.md), which bounds what a caller can take.
BUDGET_ONLY_PREFIXES = ("/iiif/",)


def api_path(request: web.Request) -> str | None:
    """The request's path relative to the REST base path, or None when it is a site-root path."""
    base = request.app[SERVICES].settings.base_path
    path = request.path
    if not base:
        return path
    return path[len(base) :] if path.startswith(base + "/") else None


def _uncounted(request: web.Request) -> bool:
    path = request.path
    return (
        request.method == "OPTIONS"
        or path in UNCOUNTED_SITE_PATHS
        or path.startswith(("/img/", "/static/", "/viewer/"))  # public images and the pages' own files
        or api_path(request) in UNCOUNTED_API_PATHS
    )


@web.middleware
async def access_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    if _uncounted(request):
        return await handler(request)
    app = request.app
    mcp_post = api_path(request) == "/mcp" and request.method == "POST"
    refused: Unauthorized | None = None
    try:
        caller = await app[IDENTIFIER].identify(request.headers, request.remote, request.cookies)
    except Unauthorized as exc:
        if not mcp_post:
            raise
        # MCP clients read a 401 as an OAuth challenge or fail opaquely, so the caller never learns the key is bad:
        # /mcp answers as for an anonymous caller (counted as one) and every tool call reports this error instead.
        refused = exc
        plain = {k: v for k, v in request.headers.items() if k.lower() != "authorization"}
        caller = await app[IDENTIFIER].identify(plain, request.remote, {})
    allowance = caller.allowance
    # Pages for people are paced by page views, apart from the API's request limit (access/policy.py says why).
    people = is_page(request)
    pace = None if request.path.startswith(BUDGET_ONLY_PREFIXES) else allowance.pace(people)
    counted_as = f"{caller.subject}#pages" if people else caller.subject
    hit = await app[ACCESS].hit(counted_as, pace.quota if pace else None, pace.window if pace else 60)
    limit = pace.quota if pace else None
    request[CALLER] = caller
    if not isinstance(hit, Allowed):
        assert pace is not None
        denied = rate_limited(allowance, pace.name, hit)
        if not mcp_post:
            raise denied
        # MCP clients turn HTTP errors into opaque failures: /mcp still answers, and each tool call in it reports
        # this denial as an isError result (protocol methods such as initialize deliver nothing and stay answered).
        request[REQUEST_DENIED] = denied
    if refused is not None:
        request[REQUEST_DENIED] = refused
    # A HEAD delivers nothing. A counted hit proves the access store answered, so an uncapped delivery needs no ping.
    meter = Meter(app[ACCESS], caller, delivers=request.method != "HEAD", alive=limit is not None)
    request[METER] = meter
    if limit is None:
        hit = None  # this route counts no requests, so its responses state no request limit (never "r=0")
    request[RATE_HEADERS] = rate_headers(allowance, {}, hit, pace)
    ledger = request[LEDGER] = Ledger()  # what a delivery reserves as it goes (an archive's members and slots)
    try:
        response = await handler(request)
    except BaseException:
        request[RATE_HEADERS] = rate_headers(allowance, meter.states, hit, pace)
        await asyncio.shield(_refund_all(meter, ledger))
        raise
    request[RATE_HEADERS] = rate_headers(allowance, meter.states, hit, pace)
    if response.status >= 300:
        await _refund_all(meter, ledger)
        return response
    if not meter.holds() and not isinstance(response, KeptResponse):
        await response.prepare(request)
        await response.write_eof()
        return response
    # Delivered means received: the request's units are committed once the client acknowledged the last byte of the
    # body (``web.wire``), refunded when it hung up, or stalled past the write deadline, before that.
    ledger.hold(meter)
    settings = app[SERVICES].settings
    wire = request[WIRE] = Wire(request.transport)
    keeper = Keeper(wire, ledger, write_timeout=settings.write_timeout, renew_every=settings.reservation_ttl / 3)
    async with keeper:
        request[KEEPER] = keeper
        await response.prepare(request)
        await response.write_eof()
        if ledger.holds(meter):
            ledger.hand(meter, wire.position())
        await keeper.finish()
    return response


async def _refund_all(meter: Meter, ledger: Ledger) -> None:
    await meter.settle(False)
    await ledger.close(None)
