"""Errors answered below the middlewares, in the one JSON error shape.

aiohttp's HTTP protocol answers some requests itself, as plain text and without CORS: a request line or header over
8,190 bytes, a request it cannot parse, and an exception that escaped every middleware. ``RequestHandler.handle_error``
makes those answers; ``JsonErrorsRequestHandler`` overrides it, and ``Application`` (aiohttp's, with only its
server factory changed) makes every connection use it, under ``web.run_app``, gunicorn's worker and the test servers.

aiohttp 3.14 has no public hook for the connection handler's class: ``Application._make_handler`` (private) is
overridden and the ``web.Server`` it returns gets one method more (``__call__`` reads the server's private ``_loop``
and ``_kwargs``). So aiohttp is pinned to one minor version in pyproject.toml, ``Application`` refuses at start-up a
server of another shape, and tests/http/test_protocol_shape.py fails when any of these private parts changes.
"""

from __future__ import annotations

import json
import logging
import secrets
import warnings
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from imagesvc.errors import ImagesvcError, InternalError, InvalidRequest
from imagesvc.web.middleware import CORS_HEADERS

__all__ = ["Application", "JsonErrorsRequestHandler"]

log = logging.getLogger("imagesvc.web")


class JsonErrorsRequestHandler(RequestHandler):
    """aiohttp's connection handler, whose own error answers are JSON errors with CORS headers.

    ``metrics`` (an ``observability.Metrics``) counts them under the route label ``unparsed``.
    """

    def __init__(self, manager: web.Server, *, metrics: Any = None, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.metrics = metrics

    def handle_error(
        self, request: Any, status: int = 500, exc: BaseException | None = None, message: str | None = None
    ) -> web.StreamResponse:
        request_id = secrets.token_hex(8)
        gone = isinstance(exc, ConnectionError)  # the client went away: observe_middleware counted it as 499
        if gone:
            log.debug("client closed the connection of a request from %s", request.remote)
        elif status >= 500:
            log.error("unhandled error from %s (request %s)", request.remote, request_id, exc_info=exc)
        else:
            log.info("refused an unparseable request from %s (%s): %s", request.remote, status, message or exc)
        if request.writer.output_size > 0:
            raise ConnectionError("the response had begun; no error answer can follow it")
        error: ImagesvcError
        if status >= 500:
            error = InternalError("The service failed while answering this request.")
        else:
            detail = (message or "malformed request")[:200]
            error = InvalidRequest(
                f"The request could not be read: {detail}.",
                recovery=["Keep the request line and each header under 8,190 bytes, and send well-formed HTTP/1.1."],
            )
        body = {**error.to_dict(), "request_id": request_id}
        response = web.Response(
            text=json.dumps(body),
            status=status,
            content_type="application/json",
            headers={**CORS_HEADERS, "X-Request-Id": request_id},
        )
        response.force_close()
        if self.metrics is not None and not gone:
            self.metrics.requests.labels("unparsed", "-", str(status)).inc()
        return response


class _Server(web.Server):
    """The low-level server, making ``JsonErrorsRequestHandler`` connections."""

    def __call__(self) -> RequestHandler:
        return JsonErrorsRequestHandler(self, loop=self._loop, **self._kwargs)


with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # aiohttp discourages subclasses; this one adds no state

    class Application(web.Application):
        """``web.Application`` whose server answers protocol-level errors as JSON (see the module docstring)."""

        def _make_handler(self, **kwargs: Any) -> web.Server:
            server = super()._make_handler(**kwargs)
            if type(server) is not web.Server or not {"_loop", "_kwargs"} <= vars(server).keys():
                raise RuntimeError(
                    f"aiohttp {aiohttp.__version__} makes its server differently from the 3.14 that "
                    "imagesvc/web/protocol.py was written for; update it (and the pin in pyproject.toml)"
                )
            server.__class__ = _Server  # same state, one method more: the connection handler it makes
            return server
