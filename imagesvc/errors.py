"""The one error family of imagesvc: a code, an HTTP status, a message a person can act on, and recovery hints.

Rendered at three edges only: the HTTP middleware (JSON body with the status), MCP (a tool result with
``isError: true``) and the CLI (stderr and a non-zero exit). Never branch on message text; branch on ``code``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
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
    """A dependency (object store, Redis, model) cannot be reached; the request can be retried."""

    code = "unavailable"
    status = 503
    default_recovery = ("Retry after the number of seconds in the Retry-After header.",)

    def __init__(self, message: str, *, retry_after: int = 5, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after
        self.headers.setdefault("Retry-After", str(retry_after))
        self.details.setdefault("retry_after", retry_after)


class InternalError(ImagesvcError):
    code = "internal"
    status = 500
    default_recovery = ("This is a fault in the service; retry later, and report it with the X-Request-Id header.",)
