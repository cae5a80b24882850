"""The JSON-RPC wire of ``/mcp``: reading and parsing a body strictly, checking one message, encoding a reply.

Bodies over ``MAX_BODY_BYTES`` are refused unread; ``NaN`` and ``Infinity`` are not JSON; a message nested deeper
than ``MAX_DEPTH`` or holding a number too large for a double is refused; ids are strings, integers or null; every
reply is strict JSON (and UTF-8).
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from aiohttp import web

from imagesvc.errors import PayloadTooLarge
from imagesvc.surface.arguments import not_text
from imagesvc.web.mcp_tools import encode

__all__ = [
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "MAX_BATCH",
    "MAX_BODY_BYTES",
    "MAX_DEPTH",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "RpcError",
    "encode_reply",
    "parse",
    "read_body",
    "unfit",
    "valid_id",
]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
MAX_BATCH = 50  # messages in one batch
MAX_DEPTH = 32  # nesting of one message: arrays and objects within each other
MAX_BODY_BYTES = 256 * 1024  # a full batch of tool calls is a few KiB; anything near this is refused unread
log = logging.getLogger("imagesvc.mcp")


class RpcError(Exception):
    """A JSON-RPC error for one message: ``code``, ``message`` and optional ``data``."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data

    def reply(self, msg_id: Any) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return {"jsonrpc": "2.0", "id": msg_id, "error": error}


def valid_id(value: Any) -> bool:
    """JSON-RPC ids are strings, integers or null; fractions, booleans and the rest are refused, and so is a string
    holding what no text holds (``not_text``): a lone surrogate cannot be echoed in a UTF-8 reply."""
    if isinstance(value, str):
        return not_text(value) is None
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


def unfit(message: dict[str, Any]) -> str | None:
    """Why a message cannot be taken, or None: nesting deeper than ``MAX_DEPTH``, or a number too large for a double
    (which JSON allows, and which would come back as the non-JSON ``Infinity``). Walked without recursion."""
    stack: list[tuple[Any, int]] = [(message, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return "A number in the message is too large; numbers must fit a double."
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        if children and depth >= MAX_DEPTH:
            return f"The message nests more than {MAX_DEPTH} levels deep."
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list | float))
    return None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse(raw: bytes) -> Any:
    """The body as strict JSON (no NaN, no Infinity); ``RpcError`` -32700 otherwise."""
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except RecursionError:
        raise RpcError(PARSE_ERROR, f"The request body nests too deeply; at most {MAX_DEPTH} levels.") from None
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError included
        raise RpcError(PARSE_ERROR, f"The request body is not valid JSON: {str(exc)[:200]}") from None


async def read_body(request: web.Request) -> bytes:
    """The body, read only while it stays under ``MAX_BODY_BYTES``: a larger one is refused before it is parsed."""
    declared = request.content_length
    chunks: list[bytes] = []
    size = 0
    if declared is None or declared <= MAX_BODY_BYTES:
        async for chunk in request.content.iter_chunked(64 * 1024):
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                break
            chunks.append(chunk)
    if (declared or 0) > MAX_BODY_BYTES or size > MAX_BODY_BYTES:
        error = PayloadTooLarge(
            f"A POST to /mcp may carry at most {MAX_BODY_BYTES // 1024} KiB.",
            recovery=[f"Split the batch: at most {MAX_BATCH} messages, over several POSTs."],
        )
        raise RpcError(INVALID_REQUEST, error.message, error.to_dict())
    return b"".join(chunks)


def encode_reply(reply: dict[str, Any]) -> bytes:
    """One reply as strict JSON in UTF-8; a result that cannot be (a NaN from a tool) becomes an internal error reply.
    A lone surrogate the reply echoes from the request (an unknown argument's name) is written as its ``\\u`` escape,
    as JSON allows: UTF-8 has no bytes for it."""
    value = reply
    try:
        text = encode(value)
    except (ValueError, TypeError, RecursionError):
        log.exception("a reply to %r is not JSON", reply.get("id"))
        error = RpcError(-32603, "The service built a reply that is not JSON; report it with the X-Request-Id.")
        value = error.reply(reply.get("id"))
        text = encode(value)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, allow_nan=False).encode("ascii")
