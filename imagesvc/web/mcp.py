"""``/mcp``: the MCP server, JSON-RPC 2.0 over Streamable HTTP, stateless, every POST answered as plain JSON.

Requests go through the same access middleware as REST (identity, request limit, budgets). Protocol faults are
JSON-RPC errors (-32700, -32600, -32601, -32602); tool failures, an exhausted budget included, are tool results with
``isError: true``, because MCP clients turn HTTP errors into opaque failures.

A POST carries at most ``mcp_wire.MAX_BODY_BYTES`` (refused unread, -32600 with a 413). A batch is bounded three
ways: at most ``mcp_wire.MAX_BATCH`` messages; each ``tools/call`` in it counts as one request against the caller's
request limit (the POST itself paid for the first); and its answers stop at ``mcp_tools.MAX_RESPONSE_BYTES``, past
which calls are answered with an error result asking for another POST. Bodies nested deeper than
``mcp_wire.MAX_DEPTH``, ids
other than a string, an integer or null, and the non-JSON constants NaN and Infinity are refused; every answer is
strict JSON.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from imagesvc import __version__, tools
from imagesvc.errors import InvalidRequest, MethodNotAllowed, Unauthorized
from imagesvc.web.app_keys import REQUEST_DENIED
from imagesvc.web.mcp_tools import Post, encode, list_tools, run_tool
from imagesvc.web.mcp_wire import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    MAX_BATCH,
    METHOD_NOT_FOUND,
    RpcError,
    encode_reply,
    parse,
    read_body,
    unfit,
    valid_id,
)

__all__ = ["PROTOCOL_VERSIONS", "mcp_delete", "mcp_get", "mcp_post"]  # wire constants live in mcp_wire, mcp_tools

PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26")  # newest first: the one offered to unknown versions
INSTRUCTIONS = (
    "Tools of a digital library of rare pre-modern books: book metadata with page images, page text and quotes with "
    "citations. Failed calls return isError with {error, message, recovery, retry_after?}. "
    "Full documentation: /llms.txt."
)


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


async def _answer(request: web.Request, message: Any, post: Post) -> dict[str, Any] | None:
    """The reply to one JSON-RPC message, or None for notifications and client responses (nothing to say)."""
    if not isinstance(message, dict):
        return RpcError(INVALID_REQUEST, "A JSON-RPC message must be an object.").reply(None)
    has_id = "id" in message
    msg_id = message.get("id")
    if has_id and not valid_id(msg_id):
        return RpcError(
            INVALID_REQUEST, "id must be a string of text (no NUL, no lone surrogate), an integer or null."
        ).reply(None)
    problem = unfit(message)
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
        raw = await read_body(request)
    except RpcError as exc:
        return _reply(exc.reply(None), status=413)
    try:
        body = parse(raw)
    except RpcError as exc:
        return _reply(exc.reply(None), status=400)
    post = Post(request)
    if not isinstance(body, list):
        reply = await _answer(request, body, post)
        if reply is None:
            return web.Response(status=202)
        return web.Response(body=encode_reply(reply), content_type="application/json", charset="utf-8")
    if not body:
        return _reply(RpcError(INVALID_REQUEST, "An empty batch is not a request.").reply(None), status=400)
    if len(body) > MAX_BATCH:
        error = InvalidRequest(
            f"A batch holds at most {MAX_BATCH} messages; this one has {len(body)}.",
            recovery=[f"Split the batch into POSTs of at most {MAX_BATCH} messages each."],
        )
        return _reply(RpcError(INVALID_REQUEST, error.message, error.to_dict()).reply(None), status=400)
    # in order, one after another: later calls in a batch see the budget the earlier ones spent
    parts: list[bytes] = []
    for message in body:
        reply = await _answer(request, message, post)
        await asyncio.sleep(0)  # a call answered from memory never yields: let other requests in between calls
        if reply is not None:
            parts.append(encode_reply(reply))
            post.sent += len(parts[-1])
    if not parts:
        return web.Response(status=202)
    return web.Response(body=b"[" + b",".join(parts) + b"]", content_type="application/json", charset="utf-8")


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
