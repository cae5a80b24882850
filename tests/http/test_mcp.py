"""The MCP endpoint over real HTTP: the official ``mcp`` client drives every tool; raw JSON-RPC covers the protocol."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import pytest
from aiohttp.test_utils import TestServer
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from imagesvc import tools
from imagesvc.access import MILLI
from imagesvc.catalog import Catalog
from imagesvc.catalog.api_keys import create_key
from imagesvc.search.by_image import matcher_for
from imagesvc.search.engine import engine_for
from imagesvc.web.app_keys import ACCESS, SERVICES

BOOK = "demo-speculum-fornacum"
GET_BOOK = {"name": "get_book", "arguments": {"book_id": BOOK}}


@asynccontextmanager
async def mcp_session(server: TestServer, key: str | None = None) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        streamable_http_client(str(server.make_url("/api/mcp")), http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def rpc(server: TestServer, body: Any, **headers: str) -> tuple[int, Any]:
    """POST a raw body (bytes as given, anything else as JSON) and return (status, parsed JSON or None)."""
    data = body if isinstance(body, bytes) else None
    async with (
        aiohttp.ClientSession() as http,
        http.post(server.make_url("/api/mcp"), data=data, json=None if data else body, headers=headers) as resp,
    ):
        text = await resp.text()
        return resp.status, (None if not text else await resp.json())


def free_key(data_dir: Path) -> tuple[str, str]:
    catalog = Catalog(data_dir / "catalog.sqlite3")
    try:
        key, record = create_key(catalog, "free", "mcp test")
    finally:
        catalog.close()
    return key, f"key:{record.id}"


def _small_jpeg_base64() -> str:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 120, 40)).save(buffer, "JPEG")
    return base64.b64encode(buffer.getvalue()).decode()


KEYS_ONLY = {"get_book_archive", "list_dataset_images", "list_dataset_changes"}  # bulk tools (spec §5)


async def examples(session: ClientSession) -> dict[str, dict[str, Any]]:
    """Valid arguments for each tool, taken from the demo library through the tools themselves."""
    args: dict[str, dict[str, Any]] = {
        "list_books": {"limit": 2},
        "get_book": {"book_id": BOOK},
        "get_quote": {"book_id": BOOK, "page": 2},
        "get_quotes": {"book_id": BOOK, "pages": [1, 2]},
        "get_book_text": {"book_id": BOOK, "from": 1, "to": 3},
        "get_book_images": {"book_id": BOOK, "limit": 3},
        "search_images": {"query": "plant", "limit": 3},
        "list_collections": {},
        "get_vectors": {"store": "gallery", "limit": 2},
        "search_images_by_image": {"image": _small_jpeg_base64(), "limit": 3},
        "get_book_archive": {"book_id": BOOK, "to": 2},
        "list_dataset_images": {"limit": 2},
        "list_dataset_changes": {},
        "search_within_book": {"book_id": BOOK, "q": "the", "limit": 2},
    }
    names = {t.name for t in (await session.list_tools()).tools}
    if "get_book_images" in names:
        images = await session.call_tool("get_book_images", {"book_id": BOOK, "limit": 1})
        items = images.structured_content.get("items") or images.structured_content.get("images") or []
        if items:
            args["get_image"] = {"id": items[0]["id"]}
    if "list_collections" in names:
        found = await session.call_tool("list_collections", {})
        if found.structured_content["items"]:
            args["get_collection"] = {"slug": found.structured_content["items"][0]["slug"]}
    return args


async def test_initialize_negotiates_the_protocol_version(server: TestServer) -> None:
    async with mcp_session(server) as session:
        assert session.server_capabilities is not None
        assert session.server_capabilities.tools is not None
    for asked, agreed in (("2025-03-26", "2025-03-26"), ("2025-06-18", "2025-06-18"), ("1999-01-01", "2025-11-25")):
        message = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": asked}}
        status, body = await rpc(server, message)
        assert status == 200
        assert body["result"]["protocolVersion"] == agreed
        assert body["result"]["serverInfo"]["name"] == "imagesvc"


async def test_the_official_client_and_a_plain_post_list_the_same_tools(server: TestServer) -> None:
    """tools/list as the official client reads it equals the plain JSON-RPC answer, and each listed tool's arguments
    are the query parameters OpenAPI gives its REST route (the path's own excepted)."""
    async with mcp_session(server) as session:
        listed = {t.name: t for t in (await session.list_tools()).tools}
    status, body = await rpc(server, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert status == 200
    plain = {t["name"]: t for t in body["result"]["tools"]}
    assert set(listed) == set(plain) and len(plain) >= 10
    for name, entry in plain.items():
        assert listed[name].input_schema == entry["inputSchema"]
        assert listed[name].description == entry["description"]
        assert listed[name].annotations is not None and listed[name].annotations.read_only_hint is True
    async with aiohttp.ClientSession() as http, http.get(server.make_url("/api/openapi.json")) as resp:
        doc = await resp.json()
    for path, ops in doc["paths"].items():
        operation = ops.get("get", {})
        if "x-tool" not in operation:
            continue
        in_path = {p["name"] for p in operation["parameters"] if p["in"] == "path"}
        in_query = {p["name"] for p in operation["parameters"] if p["in"] == "query"}
        assert in_query | in_path == set(plain[operation["x-tool"]]["inputSchema"]["properties"]), path


async def _search_settled(server: TestServer, limit: float = 300.0) -> None:
    """Wait until the server's searches answer in full: the window hashes for search by image built and the text
    model loaded (or off). Until then a search answers with what is there, and two doors asked a moment apart differ."""
    services = server.app[SERVICES]
    matcher, dense = matcher_for(services), engine_for(services).dense
    deadline = time.monotonic() + limit
    while True:
        blocks = await matcher.ready() is not None and matcher.state().startswith("ready")
        text = dense.model is None or bool(dense.error) or await dense.ready()
        if blocks and text:
            return
        assert time.monotonic() < deadline, (matcher.state(), dense.describe())
        await asyncio.sleep(0.2)


async def test_every_tool_answers_the_official_client_as_it_answers_a_plain_post(server: TestServer) -> None:
    await _search_settled(server)
    async with mcp_session(server) as session:
        args = await examples(session)
        names = sorted(t.name for t in (await session.list_tools()).tools)
        missing = [name for name in names if name not in args]
        assert not missing, f"add valid demo-library arguments for {missing} to examples()"
        for name in names:
            result = await session.call_tool(name, args[name])
            message = {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "tools/call",
                "params": {"name": name, "arguments": args[name]},
            }
            status, plain = await rpc(server, message)
            keys_only = name in KEYS_ONLY  # this session has no key: the same 401 on both doors
            assert status == 200 and plain["result"]["isError"] is result.is_error is keys_only, (name, plain)
            assert plain["result"]["structuredContent"] == result.structured_content, name
            assert result.content[0].type == "text"


async def test_book_tool_results_carry_thumbnails_only_when_asked(server: TestServer) -> None:
    async with mcp_session(server) as session:
        plain = await session.call_tool("get_book", {"book_id": BOOK})
        result = await session.call_tool("get_book", {"book_id": BOOK, "include_images": True})
        listed = {t.name: t for t in (await session.list_tools()).tools}
    assert [block.type for block in plain.content] == ["text"]  # metadata alone by default: no ~92 KB of pictures
    assert listed["get_book"].input_schema["properties"]["include_images"]["default"] is False
    pictures = [block for block in result.content if block.type == "image"]
    assert 1 <= len(pictures) <= 4
    for picture in pictures:
        assert picture.mime_type == "image/jpeg"
        assert base64.b64decode(picture.data)[:2] == b"\xff\xd8"  # a JPEG, not an error page


async def test_a_bad_key_reaches_the_official_client_as_a_message_it_can_act_on(server: TestServer) -> None:
    """A wrong key must not look like an OAuth challenge or an opaque transport failure to an MCP client."""
    headers = {"Authorization": "Bearer isk_not-a-real-key"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        streamable_http_client(str(server.make_url("/api/mcp")), http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        hello = await session.initialize()
        result = await session.call_tool("get_book", {"book_id": BOOK})
    assert hello.instructions is not None and hello.instructions.startswith("The API key is not known")
    assert result.is_error is True
    body = result.structured_content
    assert body["error"] == "unauthorized"
    assert "API key" in body["message"] and "not known" in body["message"]
    assert any("Authorization" in step for step in body["recovery"])
    assert "API key" in result.content[0].text
    status, raw = await rpc(server, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, Authorization="Bearer nope")
    assert status == 200 and raw == {"jsonrpc": "2.0", "id": 1, "result": {}}
    bad = {"Authorization": "Bearer nope"}
    async with aiohttp.ClientSession() as http, http.get(server.make_url("/api/books"), headers=bad) as resp:
        assert resp.status == 401 and (await resp.json())["error"] == "unauthorized"  # REST keeps its plain 401


async def test_bad_arguments_are_tool_errors_the_model_can_act_on(server: TestServer) -> None:
    async with mcp_session(server) as session:
        wrong_type = await session.call_tool("get_quote", {"book_id": BOOK, "page": "two"})
        unknown_book = await session.call_tool("get_book", {"book_id": "no-such-book"})
    assert wrong_type.is_error is True
    assert wrong_type.structured_content["error"] == "invalid_request"
    assert "page" in wrong_type.structured_content["message"]
    assert unknown_book.is_error is True
    assert unknown_book.structured_content["error"] == "not_found"
    assert unknown_book.structured_content["recovery"]


async def test_exhausted_budget_is_an_error_result_with_retry_after(server: TestServer, data_dir: Path) -> None:
    key, subject = free_key(data_dir)
    access = server.app[ACCESS]
    assert await access.commit(await access.reserve(subject, "text", 2000 * MILLI, 2000 * MILLI))
    async with mcp_session(server, key) as session:
        result = await session.call_tool("get_quote", {"book_id": BOOK, "page": 2})
    assert result.is_error is True
    body = result.structured_content
    assert body["error"] == "rate_limited"
    assert body["retry_after"] >= 1
    assert body["recovery"]


async def test_a_failed_call_spends_no_budget(server: TestServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tool that reserves text and then fails: its 200 JSON-RPC answer must not commit the reservation."""

    async def reserve_then_fail(services: Any, call: tools.Call) -> dict[str, Any]:
        await call.meter.reserve("text", 3)
        raise tools_errors.Conflict("failed after reserving")

    from imagesvc import errors as tools_errors

    schema = {"type": "object", "additionalProperties": False, "properties": {}}
    monkeypatch.setitem(tools.REGISTRY, "fail_late", tools.Tool("fail_late", "Fails.", schema, reserve_then_fail))
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "fail_late"}},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "get_quote", "arguments": {"book_id": BOOK, "page": 1}},
        },
    ]
    status, body = await rpc(server, batch)
    assert status == 200
    assert [reply["result"]["isError"] for reply in body] == [True, False]
    async with aiohttp.ClientSession() as http, http.get(server.make_url("/api/rate_limit")) as resp:
        quota = await resp.json()
    assert quota["pools"]["text"]["used"] == 1  # the quote's page; the failed call's 3 units were refunded


async def test_protocol_errors_are_json_rpc_errors(server: TestServer) -> None:
    cases: list[tuple[Any, int]] = [
        (b"{not json", -32700),
        ([], -32600),
        ({"jsonrpc": "1.0", "id": 1, "method": "ping"}, -32600),
        ({"jsonrpc": "2.0", "id": 1, "method": 7}, -32600),
        ({"jsonrpc": "2.0", "id": {"no": 1}, "method": "ping"}, -32600),
        ({"jsonrpc": "2.0", "id": 1, "method": "resources/list"}, -32601),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "no_such_tool"}}, -32602),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_book", "arguments": [1]}}, -32602),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1]}, -32602),
    ]
    for body, code in cases:
        status, reply = await rpc(server, body)
        assert status in (200, 400), body
        assert reply["jsonrpc"] == "2.0"
        assert reply["error"]["code"] == code, (body, reply)


async def test_notifications_get_202_and_batches_answer_each_request(server: TestServer) -> None:
    status, body = await rpc(server, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert (status, body) == (202, None)
    batch = [
        {"jsonrpc": "2.0", "id": "a", "method": "ping"},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": "b", "method": "tools/call", "params": GET_BOOK},
        {"jsonrpc": "2.0", "id": "c", "method": "nope"},
        42,
    ]
    status, replies = await rpc(server, batch)
    assert status == 200
    assert [r["id"] for r in replies] == ["a", "b", "c", None]
    assert replies[0]["result"] == {}
    assert replies[1]["result"]["structuredContent"]["slug"] == BOOK
    assert replies[2]["error"]["code"] == -32601
    assert replies[3]["error"]["code"] == -32600


async def test_get_delete_and_preflight(server: TestServer) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.get(server.make_url("/api/mcp")) as resp:
            assert resp.status == 405  # no event stream
            assert "POST" in resp.headers["Allow"]
            assert (await resp.json())["error"] == "method_not_allowed"
        async with http.delete(server.make_url("/api/mcp")) as resp:
            assert resp.status == 204  # stateless: no session to end
        preflight = {"Origin": "https://example.org", "Access-Control-Request-Method": "POST"}
        async with http.options(server.make_url("/api/mcp"), headers=preflight) as resp:
            assert resp.status == 204
            assert "POST" in resp.headers["Access-Control-Allow-Methods"]
            assert "Mcp-Protocol-Version" in resp.headers["Access-Control-Allow-Headers"]
        async with http.post(server.make_url("/api/mcp"), json={"jsonrpc": "2.0", "id": 1, "method": "ping"}) as resp:
            assert resp.headers["Access-Control-Allow-Origin"] == "*"
            assert resp.content_type == "application/json"


async def test_unsupported_protocol_header_is_refused(server: TestServer) -> None:
    status, body = await rpc(server, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, **{"Mcp-Protocol-Version": "2020"})
    assert status == 400
    assert "2025-06-18" in body["error"]["message"]


async def test_request_limit_reaches_the_official_client_as_an_error_result(server: TestServer) -> None:
    """Past the anonymous 60 requests an hour, /api/mcp still answers: each tool call is an isError result."""
    async with mcp_session(server) as session:  # initialize (and its notification) count as requests too
        for _ in range(70):
            result = await session.call_tool("list_books", {"limit": 1})
            if result.is_error:
                break
        assert result.is_error is True
        body = result.structured_content
        assert body["error"] == "rate_limited"
        assert body["pool"] == "requests"
        assert body["retry_after"] >= 1


def _strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


async def raw_post(server: TestServer, data: bytes, **headers: str) -> tuple[int, Any]:
    """POST ``data`` as it is; the answer parsed as strict JSON (NaN or Infinity in it fail the test)."""
    headers = {"Content-Type": "application/json", **headers}
    async with aiohttp.ClientSession() as http, http.post(server.make_url("/api/mcp"), data=data, headers=headers) as r:
        text = await r.text()
        return r.status, (_strict(text) if text else None)


def call(i: int, name: str = "list_books", arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments if arguments is not None else {"limit": 1}}
    return {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params}


async def test_ids_must_be_strings_integers_or_null_and_answers_strict_json(server: TestServer) -> None:
    for raw_id in ("NaN", "Infinity", "-Infinity"):
        status, body = await raw_post(server, b'{"jsonrpc":"2.0","id":%s,"method":"ping"}' % raw_id.encode())
        assert (status, body["error"]["code"], body["id"]) == (400, -32700, None), raw_id
    for raw_id in ("1e999", "1.5", "true", "[1]", '{"a":1}'):
        _, body = await raw_post(server, b'{"jsonrpc":"2.0","id":%s,"method":"ping"}' % raw_id.encode())
        assert (body["error"]["code"], body["id"]) == (-32600, None), raw_id
    for raw_id, echoed in (
        ('"x"', "x"),
        ("7", 7),
        ("null", None),
        ("123456789012345678901", 123456789012345678901),
    ):
        status, body = await raw_post(server, b'{"jsonrpc":"2.0","id":%s,"method":"ping"}' % raw_id.encode())
        assert (status, body["result"], body["id"]) == (200, {}, echoed), raw_id
    _, body = await raw_post(server, json.dumps(call(1, "list_books", {"limit": 0})).replace("0}", "1e999}").encode())
    assert body["error"]["code"] == -32600 and body["id"] == 1  # a number too large for a double, in the arguments


async def test_deep_nesting_is_a_json_rpc_error_not_a_500(server: TestServer) -> None:
    status, body = await raw_post(server, b"[" * 100_000)
    assert (status, body["error"]["code"]) == (400, -32700)
    deep: Any = "x"
    for _ in range(900):
        deep = [deep]
    _, body = await raw_post(server, json.dumps(call(5, "get_book", {"book_id": deep})).encode())
    assert body["error"]["code"] == -32600 and body["id"] == 5
    _, body = await raw_post(server, json.dumps([call(6, "get_book", {"book_id": deep}), call(7)]).encode())
    assert [reply.get("error", {}).get("code") for reply in body] == [-32600, None]  # the rest of the batch runs
    _, body = await raw_post(server, json.dumps(call(8, "get_book", {"book_id": [[[["x"]]]]})).encode())
    assert body["result"]["isError"] is True and body["result"]["structuredContent"]["error"] == "invalid_request"


async def test_a_batch_holds_at_most_50_messages(server: TestServer) -> None:
    status, body = await raw_post(server, json.dumps([call(i) for i in range(51)]).encode())
    assert status == 400
    assert body["error"]["code"] == -32600 and body["id"] is None
    assert body["error"]["data"]["error"] == "invalid_request" and "50" in body["error"]["data"]["recovery"][0]
    async with aiohttp.ClientSession() as http, http.get(server.make_url("/api/rate_limit")) as resp:
        assert resp.status == 200  # nothing of the refused batch ran
    status, body = await raw_post(server, json.dumps([call(i) for i in range(50)]).encode())
    assert status == 200 and len(body) == 50 and not any(reply["result"]["isError"] for reply in body)


async def test_each_call_in_a_batch_counts_against_the_request_limit(server: TestServer) -> None:
    """Anonymous callers have 60 requests an hour: a batch of 50 calls spends 50 of them, not 1."""
    _, first = await raw_post(server, json.dumps([call(i) for i in range(50)]).encode())
    assert [reply["result"]["isError"] for reply in first] == [False] * 50
    _, second = await raw_post(server, json.dumps([call(i) for i in range(50)]).encode())
    outcomes = [reply["result"]["isError"] for reply in second]
    assert outcomes == [False] * 10 + [True] * 40
    denied = second[-1]["result"]["structuredContent"]
    assert denied["error"] == "rate_limited" and denied["pool"] == "requests" and denied["retry_after"] >= 1
    _, ping = await raw_post(server, json.dumps([{"jsonrpc": "2.0", "id": 1, "method": "ping"}, call(2)]).encode())
    assert ping[0]["result"] == {} and ping[1]["result"]["isError"] is True  # protocol messages still answered


async def test_a_batch_answer_is_bounded_and_overflowing_calls_spend_nothing(
    server: TestServer, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Calls past the byte cap of one POST are answered with an error asking for another POST; they spend nothing."""
    from imagesvc.web import mcp_tools

    monkeypatch.setattr(mcp_tools, "MAX_RESPONSE_BYTES", 64 * 1024)  # the demo books' answers are small
    key, _ = free_key(data_dir)
    quote = {"book_id": BOOK, "page": 1}
    status, body = await rpc(server, [call(i, "get_quote", quote) for i in range(40)], Authorization=f"Bearer {key}")
    assert status == 200 and len(body) == 40
    answered = [reply for reply in body if not reply["result"]["isError"]]
    refused = [reply["result"]["structuredContent"] for reply in body if reply["result"]["isError"]]
    assert answered and refused, "the cap should cut this batch"
    assert all(error["error"] == "invalid_request" and "another POST" in error["recovery"][0] for error in refused)
    assert sum(len(json.dumps(reply, ensure_ascii=False)) for reply in answered) <= 64 * 1024
    assert all(len(json.dumps(error)) < 1024 for error in refused)  # short: the whole POST stays near the cap
    async with aiohttp.ClientSession() as http:
        headers = {"Authorization": f"Bearer {key}"}
        async with http.get(server.make_url("/api/rate_limit"), headers=headers) as resp:
            quota = await resp.json()
    assert quota["pools"]["text"]["used"] == len(answered)  # one page each, for the delivered quotes only
