"""Process logging: human text or one JSON object per line (``IMAGESVC_LOG_FORMAT``), every record stamped with the
id of the request it was logged under."""

from __future__ import annotations

import contextvars
import hashlib
import json
import logging
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import IO, Any

__all__ = [
    "JsonFormatter",
    "RequestIdFilter",
    "TextFormatter",
    "bind_request_id",
    "configure_logging",
    "hash_subject",
    "unbind_request_id",
]

# A getter rather than the id itself: the id is assigned by a middleware that runs after the one that binds it.
_request_id: contextvars.ContextVar[Callable[[], str] | None] = contextvars.ContextVar("request_id", default=None)
# Attributes every LogRecord has; anything else on a record came from ``extra=`` and goes into the JSON object.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime", "taskName"}
_OURS = "_imagesvc_handler"


def bind_request_id(getter: Callable[[], str]) -> contextvars.Token[Callable[[], str] | None]:
    """Records logged in this context (and tasks started from it) carry ``getter()`` as ``request_id``."""
    return _request_id.set(getter)


def unbind_request_id(token: contextvars.Token[Callable[[], str] | None]) -> None:
    _request_id.reset(token)


def hash_subject(subject: str) -> str:
    """A log-safe stand-in for a caller's subject (an address or user id): its kind and 12 hex digits of SHA-256.

    Lines from one caller still correlate, but an address or user id is not written to the logs.
    """
    kind, _, _ = subject.partition(":")
    return f"{kind}:{hashlib.sha256(subject.encode()).hexdigest()[:12]}"


class RequestIdFilter(logging.Filter):
    """Sets ``record.request_id`` from the bound request (``-`` outside a request) unless ``extra=`` gave one."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            getter = _request_id.get()
            record.request_id = getter() if getter is not None else "-"
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, request_id, every ``extra=`` field,
    and ``exception`` (the formatted traceback) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message``, with ``[request id]`` appended inside a request."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        request_id = getattr(record, "request_id", "-")
        return line if request_id == "-" else f"{line} [{request_id}]"


def configure_logging(level: str, fmt: str = "text", stream: IO[str] | None = None) -> logging.Handler:
    """Send every logger's records at ``level`` or above to ``stream`` (stderr) as ``fmt`` (``text`` or ``json``).

    Replaces the handler an earlier call installed and leaves others (a test harness's) alone. Returns the handler.
    """
    if fmt not in ("text", "json"):
        raise ValueError(f"unknown log format {fmt!r}; valid: text, json")
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _OURS, False)]:
        root.removeHandler(old)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(RequestIdFilter())
    setattr(handler, _OURS, True)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # faiss's loader reports each CPU-specific build it tries and cannot load (ModuleNotFoundError for AVX512 on a
    # CPU without it) at INFO: expected on most machines, and alarming in a newcomer's first log.
    logging.getLogger("faiss.loader").setLevel(max(logging.WARNING, root.level))
    return handler
