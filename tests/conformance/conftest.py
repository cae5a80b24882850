"""One live server on the demo library per test, a key with room for many calls, and its four doors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer

from imagesvc.app import build_app
from imagesvc.catalog import Catalog
from imagesvc.catalog.api_keys import create_key
from tests.conformance.doors import Doors
from tests.library import settings_for


@pytest.fixture
async def server(data_dir: Path) -> AsyncIterator[TestServer]:
    # search_wait: every door must see the same ranking, so none may answer before the text model is ready.
    srv = TestServer(build_app(settings_for(data_dir, search_wait=600)), host="127.0.0.1")
    await srv.start_server()
    yield srv
    await srv.close()


@pytest.fixture
async def doors(server: TestServer, data_dir: Path) -> Doors:
    """Every door of ``server``, with an enterprise key: the suite makes more calls than an anonymous hour allows."""
    catalog = Catalog(data_dir / "catalog.sqlite3")
    try:
        key, _ = create_key(catalog, "enterprise", "conformance")
    finally:
        catalog.close()
    return Doors(str(server.make_url("/")), key)
