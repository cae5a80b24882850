"""Faults while serving: the S3 server or Redis goes away and comes back on the same port.

What a client sees is documented in docs/operations.md: 503 JSON ``unavailable`` with ``Retry-After`` for every
request that needs the missing dependency, never an image that was not metered, and normal answers again within
seconds of its return, with the process up throughout.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient

from imagesvc.app import build_app
from imagesvc.catalog import Catalog
from imagesvc.catalog.api_keys import create_key
from imagesvc.storage.s3 import S3Config, S3Store
from tests.library import copy_library, run_ingest, settings_for
from tests.servers import Moto, Redis

GOOD_PAGE = {"book": "demo-broken-scans", "page": "1", "tier": "thumb"}
DEMO_PAGE = {"book": "demo-speculum-fornacum", "page": "1", "tier": "thumb"}


async def assert_unavailable(resp: ClientResponse) -> None:
    assert resp.status == 503
    assert resp.content_type == "application/json"  # an error body, never image bytes
    assert int(resp.headers["Retry-After"]) > 0
    assert (await resp.json())["error"] == "unavailable"


async def eventually(probe: Callable[[], Awaitable[bool]], seconds: float) -> float:
    """Seconds until ``probe()`` is true, polling; fails after ``seconds``."""
    start = time.monotonic()
    while not await probe():
        assert time.monotonic() - start < seconds, f"not recovered within {seconds} s"
        await asyncio.sleep(0.2)
    return time.monotonic() - start


# ---- the S3 server dies and returns ----------------------------------------------------------------------------


@pytest.fixture
def moto() -> Iterator[Moto]:
    server = Moto()
    yield server
    server.stop()


async def test_s3_down_gives_503_and_recovers(
    moto: Moto, demo_library: dict[str, Any], tmp_path: Path, aiohttp_client: Any
) -> None:
    config = S3Config(moto.endpoint, "faults", access_key="moto", secret_key="moto", max_attempts=2)
    bucket = S3Store(config)
    await bucket.ensure_bucket()
    await bucket.close()
    s3 = {
        "storage": "s3",
        "s3_endpoint": moto.endpoint,
        "s3_bucket": "faults",
        "s3_access_key": "moto",
        "s3_secret_key": "moto",
        "image_host": "https://img.example",
    }
    settings = settings_for(tmp_path / "data", **s3)
    broken = demo_library["manifest"].parent / "broken" / "broken-manifest.json"
    await asyncio.to_thread(run_ingest, broken, settings, S3Store(config))
    client: TestClient = await aiohttp_client(build_app(settings))
    resp = await client.get("/api/image", params=GOOD_PAGE)
    assert resp.status == 200
    image = await resp.read()
    unread = {**GOOD_PAGE, "tier": "display"}  # never delivered yet, so not held in memory

    moto.stop()
    kept = await client.get("/api/image", params=GOOD_PAGE)  # a public tier delivered before is still served
    assert kept.status == 200 and await kept.read() == image
    started = time.monotonic()
    await assert_unavailable(await client.get("/api/image", params=unread))
    # Bounded retries: a dead store fails, it does not hang (botocore's defaults retry for minutes). A generous
    # bound that only such a hang exceeds, not a measure of speed.
    assert time.monotonic() - started < 60
    health = await client.get("/health")
    assert health.status == 503 and (await health.json())["status"] == "degraded"
    assert (await client.get("/api/books")).status == 200  # what needs no store still works: the process is up

    moto.restart()

    async def serves() -> bool:
        resp = await client.get("/api/image", params=unread)
        return resp.status == 200 and (await resp.read()).startswith(b"\xff\xd8")

    assert await eventually(serves, 10) < 10
    assert (await client.get("/health")).status == 200


# ---- Redis dies and returns --------------------------------------------------------------------------------------


async def test_redis_down_delivers_nothing_and_recovers(
    redis: Redis, demo_library: dict[str, Any], tmp_path: Path, aiohttp_client: Any
) -> None:
    data = copy_library(demo_library["data"], tmp_path / "data")
    catalog = Catalog(data / "catalog.sqlite3")
    key, _ = create_key(catalog, "full", "faults")
    catalog.close()
    full = {"Authorization": f"Bearer {key}"}
    client: TestClient = await aiohttp_client(
        build_app(settings_for(data, access_backend="redis", redis_url=redis.url))
    )
    clean = await client.get("/api/image", params={**DEMO_PAGE, "clean": "1"}, headers=full)
    assert clean.status == 200 and clean.content_type == "image/jpeg"

    redis.stop()
    # Budgets and request limits cannot be enforced: nothing that is metered is delivered, marked or clean.
    await assert_unavailable(await client.get("/api/image", params={**DEMO_PAGE, "clean": "1"}, headers=full))
    await assert_unavailable(await client.get("/api/image", params=DEMO_PAGE))
    await assert_unavailable(await client.get("/api/books"))

    redis.start()

    async def serves() -> bool:
        resp = await client.get("/api/image", params={**DEMO_PAGE, "clean": "1"}, headers=full)
        return resp.status == 200 and resp.content_type == "image/jpeg"

    assert await eventually(serves, 10) < 10
    assert (await client.get("/api/books")).status == 200


async def test_a_hung_redis_costs_a_503_within_the_deadline_whatever_the_queue(
    redis: Redis, demo_library: dict[str, Any], tmp_path: Path, aiohttp_client: Any
) -> None:
    """Redis stopped with SIGSTOP (it neither answers nor refuses): 40 requests at once, keyed deliveries and
    anonymous catalog reads, more than the client's 16 connections, each answer 503 within the deadline (1.5 s)
    rather than a socket timeout and its retry each in turn behind the others (10-30 s); free routes answer; and
    deliveries resume within 2 s of Redis answering again."""
    data = copy_library(demo_library["data"], tmp_path / "data")
    catalog = Catalog(data / "catalog.sqlite3")
    key, _ = create_key(catalog, "full", "faults")
    catalog.close()
    full = {"Authorization": f"Bearer {key}"}
    client: TestClient = await aiohttp_client(
        build_app(settings_for(data, access_backend="redis", redis_url=redis.url))
    )
    assert (await client.get("/api/image", params=DEMO_PAGE, headers=full)).status == 200
    assert redis.proc is not None
    redis.proc.send_signal(signal.SIGSTOP)
    try:

        async def timed(path: str, **kwargs: Any) -> tuple[int, float, str]:
            started = time.monotonic()
            async with client.get(path, **kwargs) as resp:
                await resp.read()
                return resp.status, time.monotonic() - started, path

        calls = [timed("/api/image", params=DEMO_PAGE, headers=full) for _ in range(30)]
        calls += [timed("/api/books") for _ in range(10)]
        calls += [timed("/health/ready")]
        answers = await asyncio.gather(*calls)
        status, took, _ = await timed("/health/live")
    finally:
        redis.proc.send_signal(signal.SIGCONT)
    assert status == 200 and took < 1.0, (status, took)
    assert {status for status, _, _ in answers} == {503}, answers
    # The first calls that get no answer within the deadline mark Redis hung; those queued behind them then fail at
    # once, however many: 10-30 s each on the code before (a socket timeout and a retry each in turn).
    longest = max(took for _, took, _ in answers)
    assert longest < 1.5 + 1.5, sorted((took, path) for _, took, path in answers)[-5:]

    async def serves() -> bool:
        return (await client.get("/api/image", params=DEMO_PAGE, headers=full)).status == 200

    assert await eventually(serves, 10) < 2.0  # a probe sees it answer again within half a second
