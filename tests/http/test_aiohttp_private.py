"""The one private part of aiohttp that imagesvc reads: a connection's count of the requests it parsed (serving.py
waits at a graceful stop for connections that have not sent their first request). This fails loudly, naming the
part, when an aiohttp release drops or changes it."""

from __future__ import annotations

import asyncio

from aiohttp import web
from aiohttp.test_utils import TestServer
from aiohttp.web_protocol import RequestHandler

from imagesvc.serving import _requests_read


def test_the_connection_handler_keeps_a_request_count_slot() -> None:
    assert "_request_count" in RequestHandler.__slots__, "aiohttp dropped RequestHandler._request_count: see serving.py"


async def test_the_count_is_zero_until_a_request_is_parsed_then_one() -> None:
    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/", ok)
    server = TestServer(app)
    await server.start_server()
    try:
        reader, writer = await asyncio.open_connection(server.host, server.port)
        low_level = server.runner.server
        assert low_level is not None
        async with asyncio.timeout(10):
            while not low_level.connections:
                await asyncio.sleep(0.01)  # polling for the accept, bounded: a hang fails the test
        (conn,) = low_level.connections
        assert _requests_read(conn) == 0
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        async with asyncio.timeout(10):
            await reader.readuntil(b"ok")
        assert _requests_read(conn) == 1
        writer.close()
    finally:
        await server.close()
