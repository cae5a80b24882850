"""The MCP endpoint over real HTTP: the official ``mcp`` client drives every tool; raw JSON-RPC covers the protocol."""

from __future__ import annotations

import base64
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
from imagesvc.app import build_app
from imagesvc.catalog import Catalog
from imagesvc.catalog.keys import create_key
from imagesvc.web.keys import ACCESS
from tests.library import settings_for

BOOK = "demo-speculum-fornacum"
GET_BOOK = {"name": "get_book", "arguments": {"book_id": BOOK}}


@pytest.fixture
async def server(data_dir: Path) -> AsyncIterator[TestServer]:
    """The real app on a loopback port."""
    srv = TestServer(build_app(settings_for(data_dir)), host="127.0.0.1")
    await srv.start_server()
    yield srv
    await srv.close()


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
    }
    names = {t.name for t in (await session.list_tools()).tools}
    if "get_book_images" in names:
        images = await session.call_tool("get_book_images", {"book_id": BOOK, "limit": 1})
        items = images.structured_content.get("items") or images.structured_content.get("images") or []
        if items:
            args["get_image"] = {"id": items[0]["id"]}
    if "list_collections" in names:
        found = await session.call_tool("list_collections", {})
        if found.structured_content["collections"]:
            args["get_collection"] = {"slug": found.structured_content["collections"][0]["slug"]}
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


async def test_list_tools_matches_the_registry_with_schemas_and_hints(server: TestServer) -> None:
    async with mcp_session(server) as session:
        listed = {t.name: t for t in (await session.list_tools()).tools}
    assert set(listed) == set(tools.load_all())
    for name, spec in tools.load_all().items():
        assert listed[name].input_schema == spec.input_schema
        assert listed[name].description == spec.description
        if spec.read_only:
            assert listed[name].annotations is not None and listed[name].annotations.read_only_hint is True


async def test_every_tool_answers_the_official_client(server: TestServer) -> None:
    async with mcp_session(server) as session:
        args = await examples(session)
        names = sorted(t.name for t in (await session.list_tools()).tools)
        missing = [name for name in names if name not in args]
        assert not missing, f"add valid demo-library arguments for {missing} to examples()"
        for name in names:
            result = await session.call_tool(name, args[name])
            assert result.is_error is False, (name, result.content[0])
            assert isinstance(result.structured_content, dict) and result.structured_content, name
            assert result.content[0].type == "text"


async def test_book_tool_results_carry_a_few_small_thumbnails(server: TestServer) -> None:
    async with mcp_session(server) as session:
        result = await session.call_tool("get_book", {"book_id": BOOK})
    pictures = [block for block in result.content if block.type == "image"]
    assert 1 <= len(pictures) <= 4
    for picture in pictures:
        assert picture.mime_type == "image/jpeg"
        assert base64.b64decode(picture.data)[:2] == b"\xff\xd8"  # a JPEG, not an error page


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
    assert await access.commit(await access.reserve(subject, "text", 2000, 2000))
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
