"""The one error family of imagesvc: a code, an HTTP status, a message a person can act on, and recovery hints.

Rendered at three edges only: the HTTP middleware (JSON body with the status), MCP (a tool result with
``isError: true``) and the CLI (stderr and a non-zero exit). Never branch on message text; branch on ``code``.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

__all__ = [
    "CatalogUnavailable",
    "Conflict",
    "Forbidden",
    "ImageRejected",
    "ImagesvcError",
    "InternalError",
    "InvalidRequest",
    "MethodNotAllowed",
    "NotFound",
    "PayloadTooLarge",
    "RangeNotSatisfiable",
    "RateLimited",
    "RequestTimeout",
    "Unauthorized",
    "Unavailable",
    "UnsupportedMediaType",
]


class ImagesvcError(Exception):
    """Base of every error the service reports to a caller."""

    code = "internal"
    status = 500
    default_recovery: tuple[str, ...] = ()

    def __init__(
        self,
        message: str,
        *,
        recovery: list[str] | tuple[str, ...] | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.detail = message  # the whole story, for operators and logs (``Unavailable`` may keep more than it shows)
        self.recovery = list(recovery if recovery is not None else self.default_recovery)
        self.details = dict(details or {})
        self.headers = dict(headers or {})

    def to_dict(self) -> dict[str, Any]:
        """The JSON body every door returns: ``{error, message, recovery, ...details}``."""
        body: dict[str, Any] = {"error": self.code, "message": self.message, "recovery": self.recovery}
        for key, value in self.details.items():
            body.setdefault(key, value)
        return body

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.message!r})"


class InvalidRequest(ImagesvcError):
    code = "invalid_request"
    status = 400
    default_recovery = ("Check the parameter named in the message against the API documentation at /llms.txt.",)


class MethodNotAllowed(InvalidRequest):
    code = "method_not_allowed"
    status = 405


class Unauthorized(ImagesvcError):
    code = "unauthorized"
    status = 401
    default_recovery = (
        "Send a valid key as 'Authorization: Bearer <key>', or send no Authorization header to be served anonymously.",
    )


class Forbidden(ImagesvcError):
    code = "forbidden"
    status = 403


class NotFound(ImagesvcError):
    code = "not_found"
    status = 404


class Conflict(ImagesvcError):
    code = "conflict"
    status = 409


class PayloadTooLarge(InvalidRequest):
    code = "payload_too_large"
    status = 413


class RequestTimeout(InvalidRequest):
    """The request body did not arrive within the time allowed for it (a body trickled in to hold a connection)."""

    code = "request_timeout"
    status = 408


class UnsupportedMediaType(InvalidRequest):
    """A body in a form or an encoding the route does not read (a compressed upload, a multipart without boundary)."""

    code = "unsupported_media_type"
    status = 415


class RangeNotSatisfiable(InvalidRequest):
    code = "range_not_satisfiable"
    status = 416


class ImageRejected(ImagesvcError):
    """An image that cannot be decoded safely: corrupt, truncated, unsupported, or a decompression bomb."""

    code = "image_rejected"
    status = 422


class RateLimited(ImagesvcError):
    code = "rate_limited"
    status = 429


class Unavailable(ImagesvcError):
    """A dependency (object store, Redis, model) cannot be reached; the request can be retried.

    A subclass that names its ``dependency`` (the catalog database, the access store, the object store) never shows
    its message to a caller: that text comes from the dependency's client and may name an internal host, port, DSN
    or path. Its public ``message`` (what every door shows, through ``to_dict``) names only the kind of dependency;
    the message given is logged (once per distinct text every ``_LOG_EVERY`` seconds, so an outage under load does
    not flood the log) and kept as ``detail`` and as ``str(error)``, for operators and logs.
    """

    code = "unavailable"
    status = 503
    default_recovery = ("Retry after the number of seconds in the Retry-After header.",)
    dependency: str | None = None  # the kind of dependency, named in the public message instead of the detail

    def __init__(self, message: str, *, retry_after: int = 5, **kwargs: Any) -> None:
        detail = message
        if self.dependency is not None:
            _log_detail(self, detail, kwargs.get("recovery"))
            message = f"The {self.dependency} cannot be used right now; retry in {retry_after} s."
            kwargs.pop("recovery", None)  # operator advice (settings to check) stays in the log with the detail
        super().__init__(message, **kwargs)
        self.detail = detail
        self.args = (detail,)  # str() and tracebacks, which only logs show, keep the whole story
        self.retry_after = retry_after
        self.headers.setdefault("Retry-After", str(retry_after))
        self.details.setdefault("retry_after", retry_after)


class CatalogUnavailable(Unavailable):
    """The catalog database cannot be reached, is saturated, or timed out a statement."""

    dependency = "catalog database"


_LOG_EVERY = 30.0  # seconds between two log lines of the same dependency detail
_logged: dict[str, float] = {}
_logged_lock = threading.Lock()
_log = logging.getLogger("imagesvc.dependencies")


def _log_detail(error: Unavailable, detail: str, recovery: Any) -> None:
    """Log a dependency's own words about an outage, at most once per text every ``_LOG_EVERY`` seconds."""
    now = time.monotonic()
    with _logged_lock:
        if now - _logged.get(detail, -_LOG_EVERY) < _LOG_EVERY:
            return
        if len(_logged) > 1000:  # texts that vary (timings, addresses): keep the memory bounded
            _logged.clear()
        _logged[detail] = now
    hint = f" ({' '.join(recovery)})" if recovery else ""
    _log.warning("%s unavailable: %s%s", error.dependency, detail, hint)


class InternalError(ImagesvcError):
    code = "internal"
    status = 500
    default_recovery = ("This is a fault in the service; retry later, and report it with the X-Request-Id header.",)
