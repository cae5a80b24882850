"""Plain-function middlewares: request ids, CORS on every response, and errors rendered as JSON."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from imagesvc.errors import (
    ImagesvcError,
    InternalError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    RequestTimeout,
)
from imagesvc.web.app_keys import RATE_HEADERS, REQUEST_ID, SERVICES

__all__ = [
    "CORS_HEADERS",
    "MAX_BODY_BYTES",
    "BodyDeadline",
    "HttpError",
    "body_deadline_middleware",
    "cors_middleware",
    "error_json",
    "error_middleware",
    "on_prepare",
]

log = logging.getLogger("imagesvc.web")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

MAX_BODY_BYTES = 1024**2  # the largest request body read (aiohttp's client_max_size)
CORS_HEADERS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Expose-Headers": "ETag, Retry-After, RateLimit, RateLimit-Policy, X-Request-Id, Content-Range, "
    "X-Pages-Truncated",
}
PREFLIGHT_HEADERS = {
    "Access-Control-Allow-Methods": "GET, HEAD, POST, DELETE, OPTIONS",
    "Access-Control-Allow-Headers": "Authorization, Content-Type, If-None-Match, Range, Mcp-Session-Id, "
    "Mcp-Protocol-Version",
    "Access-Control-Max-Age": "86400",
}


def error_json(error: ImagesvcError, request_id: str) -> web.Response:
    body = error.to_dict()
    body["request_id"] = request_id
    response = web.json_response(body, status=error.status, headers=error.headers)
    return response


@web.middleware
async def cors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Give the request an id and answer CORS preflights for every route."""
    request[REQUEST_ID] = request.headers.get("X-Request-Id") or secrets.token_hex(8)
    if request.method == "OPTIONS":
        return web.Response(status=204, headers=PREFLIGHT_HEADERS)
    return await handler(request)


async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
    """Signal handler: CORS, the request id, ``nosniff`` and the RateLimit fields go on every response just before it
    is sent, whichever code path produced it (handler, error, file, 304). Headers a response already carries win."""
    response.headers.update(CORS_HEADERS)
    response.headers["X-Request-Id"] = request.get(REQUEST_ID, "-")
    response.headers.setdefault("X-Content-Type-Options", "nosniff")  # JSON and images are never run as script
    for name, value in request.get(RATE_HEADERS, {}).items():
        response.headers.setdefault(name, value)


class BodyDeadline(RequestTimeout, TimeoutError):
    """The request body did not arrive in full within ``IMAGESVC_BODY_READ_TIMEOUT`` (408, and the connection closes).

    Also a ``TimeoutError``: aiohttp, which drains an unread body after the response, then closes the connection
    quietly instead of logging an unhandled exception.
    """

    def __init__(self, seconds: float) -> None:
        super().__init__(
            f"The request body did not arrive within {seconds:g} s.",
            recovery=["Send the body at a steady rate; a picture of a few megabytes takes seconds."],
            headers={"Connection": "close"},
        )


def _expire_body(request: web.Request, seconds: float) -> None:
    if not request.content.is_eof():
        # Every read of the body, pending or later, on any route, raises this; nothing else in the handler is cut.
        request.content.set_exception(BodyDeadline(seconds))


@web.middleware
async def body_deadline_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Give every request body a read deadline, counted from when its head arrived (a slowly sent body cannot hold a
    connection and a handler for ever). A handler still reading the body then gets ``BodyDeadline`` from its read."""
    if not request.body_exists:
        return await handler(request)
    seconds = request.app[SERVICES].settings.body_read_timeout
    timer = asyncio.get_running_loop().call_later(seconds, _expire_body, request, seconds)
    try:
        return await handler(request)
    finally:
        timer.cancel()


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Render every failure as the one JSON error shape; unexpected ones are logged and become 500s."""
    request_id = request.get(REQUEST_ID, "-")
    try:
        return await handler(request)
    except ImagesvcError as exc:
        response = error_json(exc, request_id)
        if isinstance(exc, RequestTimeout):
            response.force_close()  # the rest of a late body is not waited for
        return response
    except web.HTTPNotFound:
        return error_json(
            NotFound(
                f"There is no route {request.path!r}.",
                recovery=[
                    "See /llms.txt or "
                    f"{request.app[SERVICES].settings.base_path}/openapi.json for the routes this service has."
                ],
            ),
            request_id,
        )
    except web.HTTPMethodNotAllowed as exc:
        err = MethodNotAllowed(
            f"{request.method} is not allowed on {request.path}.",
            recovery=[f"Use one of: {', '.join(sorted(exc.allowed_methods))}."],
        )
        return error_json(err, request_id)
    except web.HTTPRequestEntityTooLarge:
        return error_json(payload_too_large(), request_id)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise  # redirects and the like are answers, not errors
        return error_json(http_error(exc), request_id)
    except ConnectionError:
        raise  # the client went away: nothing to answer, nothing to log as a fault (observe counts it as 499)
    except Exception:
        log.exception("unhandled error on %s %s (request %s)", request.method, request.path, request_id)
        return error_json(InternalError("The service failed while answering this request."), request_id)


class HttpError(InvalidRequest):
    """Another HTTP error aiohttp raised itself, with its own status."""

    def __init__(self, status: int, code: str, message: str, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.status, self.code = status, code


def payload_too_large() -> PayloadTooLarge:
    return PayloadTooLarge(
        f"The request body is over the {MAX_BODY_BYTES // 1024**2} MiB this service reads.",
        recovery=["Send a smaller body; split a JSON-RPC batch over several POSTs."],
    )


def http_error(exc: web.HTTPException) -> HttpError:
    """Any other error aiohttp raised, in the one JSON error shape with its own status and headers."""
    code = "invalid_request" if exc.status < 500 else "internal"
    headers = {k: v for k, v in exc.headers.items() if k.lower() not in ("content-type", "content-length")}
    return HttpError(exc.status, code, f"{exc.reason}.", headers=headers)
