"""HTTP test fixtures: the demo library ingested once, a private copy per test, and a client or a loopback server on
the real app."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from imagesvc.app import build_app
from tests.library import settings_for

MakeClient = Callable[..., Awaitable[TestClient]]


@pytest.fixture
def make_client(aiohttp_client: Any, data_dir: Path) -> MakeClient:
    """``await make_client(**setting_overrides)``: a client on the real app over this test's data dir."""

    async def make(**overrides: Any) -> TestClient:
        return await aiohttp_client(build_app(settings_for(data_dir, **overrides)))

    return make


# The default client and server let a search wait for the text model and the indexes (search_wait), so that two
# doors asked a moment apart rank alike; tests of the keyword-only start ask make_client for a short wait themselves.
SETTLED = {"search_wait": 120}


@pytest.fixture
async def client(make_client: MakeClient) -> TestClient:
    return await make_client(**SETTLED)


@pytest.fixture
async def server(data_dir: Path) -> AsyncIterator[TestServer]:
    """The real app on a loopback port, for clients that bring their own HTTP stack (the official MCP client, raw
    sockets)."""
    srv = TestServer(build_app(settings_for(data_dir, **SETTLED)), host="127.0.0.1")
    await srv.start_server()
    yield srv
    await srv.close()
