"""Hostile input against a real server on a socket: nothing makes a 500, and every error a route answers is the one
JSON shape.

Some of these requests never reach a route (an oversized line or body, a malformed request): they are sent over raw
sockets so that no client library tidies them up first. Those aiohttp cannot parse get its own plain 400; the proxy
answers them in the JSON shape in a deployment (tests/containers).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer
from multidict import CIMultiDict

from imagesvc.app import build_app
from imagesvc.catalog import Catalog
from imagesvc.catalog.api_keys import create_key
from tests.library import settings_for


def strict_json(text: str) -> Any:
    """Parse as strict JSON: NaN and Infinity, which Python's json accepts by default, are refused."""

    def refuse(name: str) -> Any:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


async def raw_http(server: TestServer, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` bytes as they are; return status, headers (lower-case names) and body."""
    reader, writer = await asyncio.open_connection(server.host, server.port)
    try:
        writer.write(request)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        return status, headers, body
    finally:
        writer.close()


def assert_error_shape(status: int, headers: dict[str, str], body: bytes, expected_status: int) -> dict[str, Any]:
    assert status == expected_status, body[:200]
    assert headers["content-type"].startswith("application/json"), headers
    assert headers["access-control-allow-origin"] == "*"
    error = strict_json(body.decode())
    assert isinstance(error["error"], str) and error["message"] and isinstance(error["recovery"], list)
    assert error["error"] != "internal"
    return error


async def assert_refused_and_still_serving(server: TestServer, request: bytes) -> None:
    """A request aiohttp's protocol cannot read is aiohttp's own plain 400 ( the
    proxy in front answers these in the JSON shape, tests/containers), never a 500, and the next request is served."""
    status, headers, _ = await raw_http(server, request)
    assert status == 400, headers
    async with aiohttp.ClientSession() as http, http.get(server.make_url("/api/books")) as resp:
        assert resp.status == 200


async def test_an_oversized_request_line_is_a_400_and_the_node_serves_on(server: TestServer) -> None:
    path = "/api/books?q=" + "a" * 9000
    await assert_refused_and_still_serving(server, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())


async def test_an_oversized_header_is_a_400_and_the_node_serves_on(server: TestServer) -> None:
    request = f"GET /api/books HTTP/1.1\r\nHost: x\r\nX-Big: {'b' * 9000}\r\n\r\n".encode()
    await assert_refused_and_still_serving(server, request)


async def test_a_malformed_request_is_a_400_and_the_node_serves_on(server: TestServer) -> None:
    await assert_refused_and_still_serving(
        server, b"GET /api/books HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n"
    )


async def test_a_body_over_the_limit_is_a_413_json_rpc_error_with_cors(server: TestServer) -> None:
    """/mcp refuses a body over 256 KiB before parsing it (declared or chunked): -32600 carrying the error shape."""
    body = b"[" + b"1," * (600 * 1024) + b"1]"
    head = b"POST /api/mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:300_000], body[300_000:])) + b"0\r\n\r\n"
    for request in (
        head + f"Content-Length: {len(body)}\r\n\r\n".encode() + body,
        head + b"Transfer-Encoding: chunked\r\n\r\n" + chunked,
    ):
        status, headers, answer = await raw_http(server, request)
        assert status == 413 and headers["access-control-allow-origin"] == "*"
        reply = strict_json(answer.decode())
        assert reply["error"]["code"] == -32600 and reply["id"] is None
        assert reply["error"]["data"]["error"] == "payload_too_large" and reply["error"]["data"]["recovery"]


async def test_an_unsatisfiable_range_is_a_json_416(server: TestServer) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.get(server.make_url("/api/books/demo-speculum-fornacum")) as resp:
            thumb = (await resp.json())["pages"][0]["image_thumb"]
        path = "/img/" + thumb.split("/img/", 1)[1]
        async with http.get(server.make_url(path), headers={"Range": "bytes=99999999-"}) as resp:
            body = await resp.read()
            error = assert_error_shape(resp.status, {k.lower(): v for k, v in resp.headers.items()}, body, 416)
            assert resp.headers["Content-Range"].startswith("bytes */")
        assert error["error"] == "range_not_satisfiable"
        async with http.get(server.make_url(path), headers={"Range": "bytes=0-9"}) as resp:
            assert resp.status == 206 and len(await resp.read()) == 10  # a satisfiable range still works


async def _get(server: TestServer, path: str, headers: Any) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.get(server.make_url(path), headers=headers) as resp:
        return resp.status, strict_json(await resp.text())


async def test_a_session_token_with_no_user_is_401_not_500(server: TestServer) -> None:
    for token in ("sess.v1..9999999999.x", "sess.v1.", "sess.v1.a.b.c.d", "sess.v1.u.+9999999999.x"):
        status, body = await _get(server, "/api/books", {"Authorization": f"Bearer {token}"})
        assert (status, body["error"]) == (401, "unauthorized"), token


def _key(data_dir: Path) -> str:
    catalog = Catalog(data_dir / "catalog.sqlite3")
    try:
        return create_key(catalog, "free", "hostile test")[0]
    finally:
        catalog.close()


async def test_authorization_is_bearer_and_one_key_or_401(server: TestServer, data_dir: Path) -> None:
    key = _key(data_dir)
    for value in ("Bearer", "Bearer ", "Bearer    ", "bearer", "Bearer a b", "Basic x", "", "isk_" + "x" * 4500):
        status, body = await _get(server, "/api/books", {"Authorization": value})
        assert (status, body["error"]) == (401, "unauthorized"), value
    for value in (f"Bearer\t{key}", f"Bearer \t{key}"):  # trailing OWS is the parser's to strip; inner tabs are not
        status, body = await _get(server, "/api/books", {"Authorization": value})
        assert (status, body["error"]) == (401, "unauthorized"), value
    for value in (f"Bearer {key}", f"bearer {key}", f"BEARER   {key}", f"Bearer {key} "):
        status, body = await _get(server, "/api/rate_limit", {"Authorization": value})
        assert (status, body["caller"]["class"]) == (200, "key:free"), value
    two = CIMultiDict([("Authorization", f"Bearer {key}"), ("Authorization", "Bearer isk_other")])
    status, body = await _get(server, "/api/books", two)
    assert (status, body["error"]) == (401, "unauthorized")


async def test_malformed_keys_are_401_never_500(server: TestServer) -> None:
    for key in ("isk_", "isk_zzzzzzzz_" + "A" * 43, "isk_00000000_" + "A" * 42 + "é", "isk_00000000_" + "~" * 43):
        status, body = await _get(server, "/api/books", {"Authorization": f"Bearer {key}"})
        assert (status, body["error"]) == (401, "unauthorized"), key


async def test_a_second_forwarded_for_line_cannot_pick_the_caller(data_dir: Path) -> None:
    """Behind a trusted proxy, a client's own X-Forwarded-For line used to win, buying an assistant exemption."""
    settings = settings_for(
        data_dir, trusted_proxies=("127.0.0.1",), assistant_networks=("192.0.2.0/24",), assistant_agents=("Claude",)
    )
    srv = TestServer(build_app(settings), host="127.0.0.1")
    await srv.start_server()
    try:
        agent = {"User-Agent": "Mozilla/5.0 Claude-User/1.0"}
        spoofed = CIMultiDict([*agent.items(), ("X-Forwarded-For", "192.0.2.10"), ("X-Forwarded-For", "198.51.100.4")])
        status, body = await _get(srv, "/api/rate_limit", spoofed)
        assert (status, body["caller"]["class"]) == (200, "anonymous")
        garbage = CIMultiDict([("X-Forwarded-For", "198.51.100.4"), ("X-Forwarded-For", "not-an-address")])
        statuses = [(await _get(srv, "/api/books", garbage))[0] for _ in range(61)]
        assert statuses[-1] == 429  # garbage counts as the proxy that sent it, not as a fresh caller each time
        status, _ = await _get(srv, "/api/books", {"X-Forwarded-For": "198.51.100.5"})
        assert status == 200  # the real client next door is someone else
    finally:
        await srv.close()
