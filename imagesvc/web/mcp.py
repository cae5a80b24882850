"""``/mcp``: the MCP server, JSON-RPC 2.0 over Streamable HTTP, stateless, every POST answered as plain JSON.

Requests go through the same access middleware as REST (identity, request limit, budgets). Protocol faults are
JSON-RPC errors (-32700, -32600, -32601, -32602); tool failures, an exhausted budget included, are tool results with
``isError: true``, because MCP clients turn HTTP errors into opaque failures.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from imagesvc import __version__, tools
from imagesvc.errors import MethodNotAllowed, Unauthorized
from imagesvc.web.keys import REQUEST_DENIED
from imagesvc.web.mcp_tools import list_tools, run_tool

__all__ = [
    "INVALID_PARAMS",
    "INVALID_REQUEST",
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
    instructions = INSTRUCTIONS
    refused = request.get(REQUEST_DENIED)
    if isinstance(refused, Unauthorized):  # say it at connection time too, not only in each tool call's result
        instructions = f"{refused.message} {' '.join(refused.recovery)} {INSTRUCTIONS}"
    return {
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": False}},
        "serverInfo": {"name": "imagesvc", "title": "Digital library images and texts", "version": __version__},
        "instructions": instructions,
    }


async def _ping(request: web.Request, params: dict[str, Any]) -> dict[str, Any]:
    return {}


async def _tools_list(request: web.Request, params: dict[str, Any]) -> dict[str, Any]:
    return {"tools": list_tools()}  # one page: the cursor, if any, is ignored


async def _tools_call(request: web.Request, params: dict[str, Any]) -> dict[str, Any]:
    name = params.get("name")
    known = sorted(tools.load_all())
    if not isinstance(name, str) or name not in known:
        raise RpcError(INVALID_PARAMS, f"Unknown tool: {name!r}. Tools: {', '.join(known)}.", {"tools": known})
    arguments = params.get("arguments")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise RpcError(INVALID_PARAMS, "params.arguments must be an object of the tool's arguments.")
    return await run_tool(request, name, arguments)


METHODS: dict[str, Callable[[web.Request, dict[str, Any]], Awaitable[dict[str, Any]]]] = {
    "initialize": _initialize,
    "ping": _ping,
    "tools/list": _tools_list,
    "tools/call": _tools_call,
}


def _valid_id(value: Any) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


async def _answer(request: web.Request, message: Any) -> dict[str, Any] | None:
    """The reply to one JSON-RPC message, or None for notifications and client responses (nothing to say)."""
    if not isinstance(message, dict):
        return RpcError(INVALID_REQUEST, "A JSON-RPC message must be an object.").reply(None)
    has_id = "id" in message
    msg_id = message.get("id")
    if has_id and not _valid_id(msg_id):
        return RpcError(INVALID_REQUEST, "id must be a string or a number.").reply(None)
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
        if handler is None:
            raise RpcError(METHOD_NOT_FOUND, f"Unknown method {method!r}; this server offers {', '.join(METHODS)}.")
        if not isinstance(params, dict):
            raise RpcError(INVALID_PARAMS, "params must be an object.")
        result = await handler(request, params)
    except RpcError as exc:
        return exc.reply(msg_id)
    return {"jsonrpc": "2.0", "id": msg_id, "result": result}


def _reply(body: Any, status: int = 200) -> web.Response:
    text = json.dumps(body, ensure_ascii=False)
    return web.Response(text=text, status=status, content_type="application/json")


async def mcp_post(request: web.Request) -> web.Response:
    """One JSON-RPC message or a batch (array); 202 with no body when nothing needs an answer."""
    version = request.headers.get("Mcp-Protocol-Version")
    if version is not None and version not in PROTOCOL_VERSIONS:
        supported = ", ".join(PROTOCOL_VERSIONS)
        err = RpcError(INVALID_REQUEST, f"Unsupported Mcp-Protocol-Version {version!r}; supported: {supported}.")
        return _reply(err.reply(None), status=400)
    try:
        body = json.loads(await request.read())
    except (ValueError, UnicodeDecodeError):
        return _reply(RpcError(PARSE_ERROR, "The request body is not valid JSON.").reply(None), status=400)
    if isinstance(body, list):
        if not body:
            return _reply(RpcError(INVALID_REQUEST, "An empty batch is not a request.").reply(None), status=400)
        # in order, one after another: later calls in a batch see the budget the earlier ones spent
        replies = [reply for message in body if (reply := await _answer(request, message)) is not None]
        return _reply(replies) if replies else web.Response(status=202)
    reply = await _answer(request, body)
    return web.Response(status=202) if reply is None else _reply(reply)


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
