"""HTTP observability: request metrics and the access log (one middleware), 429 counting, and ``GET /metrics``."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from imagesvc.errors import RateLimited
from imagesvc.logging_setup import bind_request_id, hash_subject, unbind_request_id
from imagesvc.web.app_keys import CALLER, METRICS, REQUEST_ID

__all__ = ["metrics", "observe_middleware", "rejections_middleware", "route_label"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
access_log = logging.getLogger("imagesvc.access")

# Status recorded for a request whose client went away before it was answered (nginx's convention).
CLIENT_CLOSED = 499


def route_label(request: web.Request) -> str:
    """The matched route's template (``/books/{book_id}``), never the raw path, so label values stay bounded;
    ``unmatched`` for requests no route took (404s on unknown paths, 405s)."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


@web.middleware
async def observe_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Outermost: binds the request id for every log record, counts and times the request, writes the access line.

    The response is sent here (as the access middleware sends the ones it counts), so that a client that hangs up
    while its body is still going out, a file from /img/ included, is counted as 499 rather than as delivered. aiohttp
    prepares it again afterwards, which a response must answer as a no-op (``web.FileResponse`` does not: see
    ``responses.PublicFile``).
    """
    started = time.perf_counter()
    registry = request.app[METRICS]
    token = bind_request_id(lambda: request.get(REQUEST_ID, "-"))
    registry.in_flight.inc()
    status = 500
    response: web.StreamResponse | None = None
    try:
        response = await handler(request)
        status = response.status
        if not response.prepared:
            await response.prepare(request)
            await response.write_eof()
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    except asyncio.CancelledError:
        status = CLIENT_CLOSED
        raise
    except ConnectionError:
        # The client went away before its answer was out: not a fault of the service, so no traceback and no 500.
        status = CLIENT_CLOSED
        if request.transport is not None and not request.transport.is_closing():
            raise  # the connection is fine: whatever failed is a fault, answered and logged as one
        # Returned, not raised: aiohttp logs a handler's exception as an error, while its own write of a response to a
        # closed connection is a quiet end of the connection.
        return response if response is not None else web.Response(status=CLIENT_CLOSED)
    finally:
        elapsed = time.perf_counter() - started
        registry.in_flight.dec()
        route = route_label(request)
        registry.requests.labels(route, request.method, str(status)).inc()
        registry.latency.labels(route, request.method).observe(elapsed)
        _log_access(request, route, status, elapsed)
        unbind_request_id(token)


def _log_access(request: web.Request, route: str, status: int, elapsed: float) -> None:
    if not access_log.isEnabledFor(logging.INFO):
        return
    caller = request.get(CALLER)
    fields = {
        "method": request.method,
        "route": route,
        "path": request.path,  # the query string is left out: it is the part a caller might put a token in
        "status": status,
        "duration_ms": round(elapsed * 1000, 2),
        "caller_class": caller.policy if caller is not None else None,
        "subject": hash_subject(caller.subject) if caller is not None else None,
    }
    if status == CLIENT_CLOSED:
        fields["client_closed"] = True
    access_log.info("%s %s %s %.1fms", request.method, request.path, status, elapsed * 1000, extra=fields)


@web.middleware
async def rejections_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Inside the error middleware: sees a 429 as the ``RateLimited`` error it is, with its pool, before rendering."""
    try:
        return await handler(request)
    except RateLimited as exc:
        caller = request.get(CALLER)
        request.app[METRICS].count_rejection(exc, caller.policy if caller is not None else "unknown")
        raise


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text exposition (format 0.0.4, which every Prometheus reads) of this app's registry; free."""
    # Rendering reads the small run-summary files; a thread keeps even that off the event loop.
    body = await asyncio.to_thread(request.app[METRICS].render)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_PLAIN_0_0_4})
