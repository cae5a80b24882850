"""``/mcp``: the MCP server, JSON-RPC 2.0 over Streamable HTTP, stateless, every POST answered as plain JSON.

Requests go through the same access middleware as REST (identity, request limit, budgets). Protocol faults are
JSON-RPC errors (-32700, -32600, -32601, -32602); tool failures, an exhausted budget included, are tool results with
``isError: true``, because MCP clients turn HTTP errors into opaque failures.

A POST carries at most ``MAX_BODY_BYTES`` (refused unread, -32600 with a 413). A batch is bounded three ways: at
most ``MAX_BATCH`` messages; each ``tools/call`` in it counts as one request against
the caller's request limit (the POST itself paid for the first); and its answers stop at ``MAX_RESPONSE_BYTES``, past
which calls are answered with an error result asking for another POST. Bodies nested deeper than ``MAX_DEPTH``, ids
other than a string, an integer or null, and the non-JSON constants NaN and Infinity are refused; every answer is
strict JSON.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from imagesvc import __version__, tools
from imagesvc.errors import InvalidRequest, MethodNotAllowed, PayloadTooLarge
from imagesvc.web.mcp_tools import MAX_RESPONSE_BYTES, Post, encode, list_tools, run_tool

__all__ = [
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "MAX_BATCH",
    "MAX_BODY_BYTES",
    "MAX_DEPTH",
    "MAX_RESPONSE_BYTES",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "PROTOCOL_VERSIONS",
    "RpcError",
    "mcp_delete",
    "mcp_get",
    "mcp_post",
]

PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26")  # newest first: the one offered to unknown versions
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
MAX_BATCH = 50  # messages in one batch
MAX_DEPTH = 32  # nesting of one message: arrays and objects within each other
MAX_BODY_BYTES = 256 * 1024  # a full batch of tool calls is a few KiB; anything near this is refused unread
log = logging.getLogger("imagesvc.mcp")
INSTRUCTIONS = (
    "Tools of a digital library of rare pre-modern books: book metadata with page images, page text and quotes with "
    "citations. Failed calls return isError with {error, message, recovery, retry_after?}. "
    "Full documentation: /llms.txt."
)


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


async def _initialize(request: web.Request, params: dict[str, Any]) -> dict[str, Any]:
    asked = params.get("protocolVersion")
    version = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]
    return {
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": False}},
        "serverInfo": {"name": "imagesvc", "title": "Digital library images and texts", "version": __version__},
        "instructions": INSTRUCTIONS,
    }


async def _ping(request: web.Request, params: dict[str, Any]) -> dict[str, Any]:
    return {}


async def _tools_list(request: web.Request, params: dict[str, Any]) -> dict[str, Any]:
    return {"tools": list_tools()}  # one page: the cursor, if any, is ignored


async def _tools_call(request: web.Request, params: dict[str, Any], post: Post) -> dict[str, Any]:
    name = params.get("name")
    known = sorted(tools.load_all())
    if not isinstance(name, str) or name not in known:
        raise RpcError(INVALID_PARAMS, f"Unknown tool: {name!r}. Tools: {', '.join(known)}.", {"tools": known})
    arguments = params.get("arguments")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise RpcError(INVALID_PARAMS, "params.arguments must be an object of the tool's arguments.")
    return await run_tool(request, name, arguments, post)


Method = Callable[[web.Request, dict[str, Any]], Awaitable[dict[str, Any]]]
METHODS: dict[str, Method] = {"initialize": _initialize, "ping": _ping, "tools/list": _tools_list}


def _valid_id(value: Any) -> bool:
    """JSON-RPC ids are strings, integers or null; fractions, booleans and the rest are refused."""
    return value is None or isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _unfit(message: dict[str, Any]) -> str | None:
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


async def _answer(request: web.Request, message: Any, post: Post) -> dict[str, Any] | None:
    """The reply to one JSON-RPC message, or None for notifications and client responses (nothing to say)."""
    if not isinstance(message, dict):
        return RpcError(INVALID_REQUEST, "A JSON-RPC message must be an object.").reply(None)
    has_id = "id" in message
    msg_id = message.get("id")
    if has_id and not _valid_id(msg_id):
        return RpcError(INVALID_REQUEST, "id must be a string, an integer or null.").reply(None)
    problem = _unfit(message)
    if problem is not None:
        return RpcError(INVALID_REQUEST, problem).reply(msg_id)
    if message.get("jsonrpc") != "2.0":
        return RpcError(INVALID_REQUEST, 'jsonrpc must be "2.0".').reply(msg_id)
    if "method" not in message and has_id and ("result" in message or "error" in message):
        return None  # a response to a server request; this server sends none, so there is nothing to match
    method = message.get("method")
    if not isinstance(method, str):
        return RpcError(INVALID_REQUEST, "method must be a string.").reply(msg_id)
    if not has_id:
        return None  # notifications (initialized, cancelled, ...) need no action from a stateless server
    params = message.get("params", {})
    if params is None:
        params = {}
    handler = METHODS.get(method)
    try:
        if handler is None and method != "tools/call":
            offered = ", ".join([*METHODS, "tools/call"])
            raise RpcError(METHOD_NOT_FOUND, f"Unknown method {method!r}; this server offers {offered}.")
        if not isinstance(params, dict):
            raise RpcError(INVALID_PARAMS, "params must be an object.")
        result = await (_tools_call(request, params, post) if handler is None else handler(request, params))
    except RpcError as exc:
        return exc.reply(msg_id)
    return {"jsonrpc": "2.0", "id": msg_id, "result": result}


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse(raw: bytes) -> Any:
    """The body as strict JSON (no NaN, no Infinity); ``RpcError`` -32700 otherwise."""
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except RecursionError:
        raise RpcError(PARSE_ERROR, f"The request body nests too deeply; at most {MAX_DEPTH} levels.") from None
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError included
        raise RpcError(PARSE_ERROR, f"The request body is not valid JSON: {str(exc)[:200]}") from None


async def _read(request: web.Request) -> bytes:
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


def _encode_reply(reply: dict[str, Any]) -> str:
    """One reply as strict JSON; a result that cannot be (a NaN from a tool) becomes an internal error reply."""
    try:
        return encode(reply)
    except (ValueError, TypeError, RecursionError):
        log.exception("a reply to %r is not JSON", reply.get("id"))
        error = RpcError(-32603, "The service built a reply that is not JSON; report it with the X-Request-Id.")
        return encode(error.reply(reply.get("id")))


def _reply(body: Any, status: int = 200) -> web.Response:
    return web.Response(text=encode(body), status=status, content_type="application/json")


async def mcp_post(request: web.Request) -> web.Response:
    """One JSON-RPC message or a batch (array); 202 with no body when nothing needs an answer."""
    version = request.headers.get("Mcp-Protocol-Version")
    if version is not None and version not in PROTOCOL_VERSIONS:
        supported = ", ".join(PROTOCOL_VERSIONS)
        err = RpcError(INVALID_REQUEST, f"Unsupported Mcp-Protocol-Version {version!r}; supported: {supported}.")
        return _reply(err.reply(None), status=400)
    try:
        raw = await _read(request)
    except RpcError as exc:
        return _reply(exc.reply(None), status=413)
    try:
        body = _parse(raw)
    except RpcError as exc:
        return _reply(exc.reply(None), status=400)
    post = Post(request)
    if not isinstance(body, list):
        reply = await _answer(request, body, post)
        return web.Response(status=202) if reply is None else _json(_encode_reply(reply))
    if not body:
        return _reply(RpcError(INVALID_REQUEST, "An empty batch is not a request.").reply(None), status=400)
    if len(body) > MAX_BATCH:
        error = InvalidRequest(
            f"A batch holds at most {MAX_BATCH} messages; this one has {len(body)}.",
            recovery=[f"Split the batch into POSTs of at most {MAX_BATCH} messages each."],
        )
        return _reply(RpcError(INVALID_REQUEST, error.message, error.to_dict()).reply(None), status=400)
    # in order, one after another: later calls in a batch see the budget the earlier ones spent
    parts: list[str] = []
    for message in body:
        reply = await _answer(request, message, post)
        await asyncio.sleep(0)  # a call answered from memory never yields: let other requests in between calls
        if reply is not None:
            parts.append(_encode_reply(reply))
            post.sent += len(parts[-1])
    return _json("[" + ",".join(parts) + "]") if parts else web.Response(status=202)


def _json(text: str) -> web.Response:
    return web.Response(text=text, content_type="application/json")


async def mcp_get(request: web.Request) -> web.Response:
    """No server-to-client event stream is offered: 405, as Streamable HTTP allows."""
    raise MethodNotAllowed(
        "This MCP endpoint offers no event stream: it is stateless and answers every POST with JSON.",
        recovery=["POST JSON-RPC 2.0 messages to /mcp with 'Content-Type: application/json'."],
        headers={"Allow": "POST, OPTIONS"},
    )


async def mcp_delete(request: web.Request) -> web.Response:
    """Sessions are not kept (no Mcp-Session-Id is ever issued), so there is nothing to end: 204."""
    return web.Response(status=204)
