"""A dependency's outage, seen from outside, names the kind of dependency and never where it lives.

Redis (the access store), the S3 server (the object store) and PostgreSQL (the catalog database) are stopped in turn
under an app that reaches them as ``localhost:<port>``; a request at every door (REST, MCP, the pages, IIIF, /health)
answers, and no response body or header holds the host or the port. The dependency's own words (which do name them)
go to the log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from imagesvc.app import build_app
from imagesvc.catalog.backends import open_catalog
from imagesvc.errors import Unavailable
from imagesvc.storage.s3 import S3Config, S3Store
from tests.library import copy_library, settings_for
from tests.servers import Moto, PostgresServer, Redis, create_database

BOOK = "demo-speculum-fornacum"
REQUESTS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/api/books", None),
    ("GET", f"/api/books/{BOOK}", None),
    ("GET", f"/api/image?book={BOOK}&page=2&tier=thumb", None),
    ("GET", f"/api/books/{BOOK}/quote?page=2", None),
    ("GET", "/api/rate_limit", None),
    ("POST", "/api/mcp", {"name": "list_books", "arguments": {"limit": 2}}),
    ("POST", "/api/mcp", {"name": "get_book", "arguments": {"book_id": BOOK}}),
    ("POST", "/api/mcp", {"name": "get_quote", "arguments": {"book_id": BOOK, "page": 2}}),
    ("GET", "/", None),
    ("GET", f"/book/{BOOK}", None),
    ("GET", f"/iiif/3/{BOOK}-2/info.json", None),
    ("GET", f"/iiif/3/{BOOK}-2/full/max/0/default.jpg", None),
    ("GET", "/health", None),
]


async def _every_door(client: TestClient) -> list[tuple[str, int, str]]:
    """(what was asked, status, the whole response as text: headers and body) for each of ``REQUESTS``."""
    answers = []
    for method, path, call in REQUESTS:
        if call is None:
            resp = await client.request(method, path, headers={"Accept": "text/html" if "/api" not in path else "*/*"})
        else:
            message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}
            resp = await client.post(path, json=message, headers={"Accept": "application/json"})
        body = await resp.read()
        headers = "\n".join(f"{k}: {v}" for k, v in resp.headers.items())
        answers.append((f"{method} {path} {call or ''}", resp.status, headers + "\n\n" + body.decode("latin-1")))
    return answers


def _assert_nothing_names(answers: list[tuple[str, int, str]], port: int, kind: str) -> None:
    where = re.compile(rf"localhost|(?<![0-9A-Za-z]){port}(?![0-9A-Za-z])")
    leaks = [(asked, status, found[0]) for asked, status, text in answers if (found := where.search(text))]
    assert not leaks, f"responses naming the dependency: {leaks}"
    unavailable = [text for _, status, text in answers if status == 503 or '"unavailable"' in text]
    assert unavailable, "the outage was not noticed at any door"
    assert any(kind in text for text in unavailable), f"no 503 names the {kind}"


@pytest.fixture
def data(demo_library: dict[str, Any], tmp_path: Path) -> Path:
    return copy_library(demo_library["data"], tmp_path / "data")


async def test_redis_down(redis: Redis, data: Path, aiohttp_client: Any, caplog: pytest.LogCaptureFixture) -> None:
    url = f"redis://localhost:{redis.port}/0"
    client: TestClient = await aiohttp_client(build_app(settings_for(data, access_backend="redis", redis_url=url)))
    assert (await client.get("/api/books")).status == 200
    redis.stop()
    with caplog.at_level(logging.WARNING, logger="imagesvc.dependencies"):
        answers = await _every_door(client)
    _assert_nothing_names(answers, redis.port, "access store")
    assert f"localhost:{redis.port}" in caplog.text  # the detail is the operator's, in the log


async def test_s3_down(data: Path, aiohttp_client: Any, caplog: pytest.LogCaptureFixture) -> None:
    moto = Moto()
    try:
        endpoint = f"http://localhost:{moto.port}"
        config = S3Config(endpoint, "public-errors", access_key="moto", secret_key="moto", max_attempts=1)
        bucket = S3Store(config)
        await bucket.ensure_bucket()
        await bucket.close()
        s3 = {"storage": "s3", "s3_endpoint": endpoint, "s3_bucket": "public-errors"}
        s3 |= {"s3_access_key": "moto", "s3_secret_key": "moto", "image_host": "https://img.example"}
        client: TestClient = await aiohttp_client(build_app(settings_for(data, **s3)))
        assert (await client.get("/health")).status == 200
    finally:
        moto.stop()
    with caplog.at_level(logging.WARNING, logger="imagesvc.dependencies"):
        answers = await _every_door(client)
    _assert_nothing_names(answers, moto.port, "object store")
    assert f"localhost:{moto.port}" in caplog.text


async def test_postgres_down(postgres_server: PostgresServer, data: Path, aiohttp_client: Any) -> None:
    name = f"public_errors_{uuid.uuid4().hex[:12]}"
    url = create_database(postgres_server, name).replace("127.0.0.1", "localhost")
    client: TestClient = await aiohttp_client(build_app(settings_for(data, catalog="postgres", database_url=url)))
    assert (await client.get("/api/books")).status == 200
    postgres_server.stop()
    try:
        answers = await _every_door(client)
        # A catalog opened while the database is down (a node or worker starting) fails with the driver's words,
        # which name the server; what a door would render of that error (to_dict) must not.
        with pytest.raises(Unavailable) as opening:
            await asyncio.to_thread(open_catalog, settings_for(data, catalog="postgres", database_url=url))
    finally:
        postgres_server.start()
    _assert_nothing_names(answers, postgres_server.port, "catalog database")
    _assert_nothing_names([("open_catalog", 503, json.dumps(opening.value.to_dict()))], postgres_server.port, "")
    assert str(postgres_server.port) in opening.value.detail  # the operator's words keep the server
