"""Two real ``imagesvc serve`` processes sharing Redis and an S3 server (moto; Ceph RGW too, and required under CI).

Budgets and request limits stay exact across both under a concurrent burst, and a catalog snapshot published by
``imagesvc ingest`` while both serve is taken up by both (one by polling, one on SIGHUP) with no failed request.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from imagesvc.access import MILLI
from imagesvc.access.identity import sign_session
from imagesvc.access.redis import RedisAccess
from imagesvc.catalog import Catalog
from imagesvc.catalog.api_keys import create_key
from imagesvc.storage.s3 import S3Config, S3Store
from tests.servers import S3Server, start_serve
from tests.test_ingest_kills import IMAGESVC, ingest_env, run, small_manifest

pytestmark = pytest.mark.slow  # two serving processes, Redis and an S3 server (Ceph too) per test

PAGE = {"book": "demo-broken-scans", "page": "1", "tier": "thumb"}


class Node:
    """One ``imagesvc serve`` subprocess."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log = log
        self.proc, self.url = start_serve(env, log, command=[IMAGESVC, "serve"])  # on a port it picks and names
        self.port = int(self.url.rsplit(":", 1)[1])

    async def ready(self, session: aiohttp.ClientSession) -> None:
        deadline = time.monotonic() + 30
        while True:
            assert self.proc.poll() is None, f"imagesvc serve exited: see {self.log}"
            try:
                async with session.get(f"{self.url}/health") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            assert time.monotonic() < deadline, f"imagesvc serve did not come up: see {self.log}"
            await asyncio.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(params=["moto_server", "ceph_rgw"])
def cluster(request: Any, redis_server: str, demo_library: dict[str, Any], tmp_path: Path) -> Iterator[dict[str, Any]]:
    """An ingest host that published the broken-scans book, and two nodes serving its snapshot."""
    s3: S3Server = request.getfixturevalue(request.param)
    bucket = f"scale-{time.time_ns() % 10**12}"
    shared = {
        "IMAGESVC_STORAGE": "s3",
        "IMAGESVC_S3_ENDPOINT": s3.endpoint_url,
        "IMAGESVC_S3_BUCKET": bucket,
        "IMAGESVC_S3_ACCESS_KEY": s3.access_key,
        "IMAGESVC_S3_SECRET_KEY": s3.secret_key,
        "IMAGESVC_IMAGE_HOST": "https://img.example",
        "IMAGESVC_ACCESS_BACKEND": "redis",
        "IMAGESVC_REDIS_URL": redis_server,
        "IMAGESVC_SESSION_SECRET": "test-secret",
        "IMAGESVC_TRUSTED_PROXIES": "127.0.0.1",
        "IMAGESVC_SNAPSHOT_PREFIX": "snapshots",
        "IMAGESVC_LOG_LEVEL": "warning",
    }
    host = tmp_path / "ingest-host"
    broken = demo_library["manifest"].parent / "broken" / "broken-manifest.json"
    host.mkdir()
    catalog = Catalog(host / "catalog.sqlite3")
    key, _ = create_key(catalog, "enterprise", "scale-out load")
    catalog.close()
    run(broken, ingest_env(host, **shared))  # ingests into S3 and publishes the first snapshot
    polling = ingest_env(tmp_path / "node-a", **shared, IMAGESVC_SNAPSHOT_POLL_SECONDS="1")
    on_signal = ingest_env(tmp_path / "node-b", **shared, IMAGESVC_SNAPSHOT_POLL_SECONDS="0")
    nodes = [Node(polling, tmp_path / "node-a.log"), Node(on_signal, tmp_path / "node-b.log")]
    try:
        yield {"nodes": nodes, "host": host, "env": ingest_env(host, **shared), "key": key, "redis": redis_server}
    finally:
        for node in nodes:
            node.stop()
        config = S3Config(s3.endpoint_url, bucket, s3.region, s3.access_key, s3.secret_key)
        asyncio.run(_empty(S3Store(config)))


async def _empty(store: S3Store) -> None:
    try:
        for key in [info.key async for info in store.list("")]:
            await store.delete(key)
    finally:
        await store.close()


async def test_budgets_and_request_limits_are_exact_across_two_processes(cluster: dict[str, Any]) -> None:
    nodes: list[Node] = cluster["nodes"]
    async with aiohttp.ClientSession() as session:
        for node in nodes:
            await node.ready(session)
        user = f"reader-{time.time_ns()}"
        auth = {"Authorization": f"Bearer {sign_session(user, int(time.time()) + 3600, 'test-secret')}"}
        async with session.get(f"{nodes[0].url}/api/rate_limit", headers=auth) as resp:
            limit = (await resp.json())["pools"]["images"]["limit"]
        access = RedisAccess(cluster["redis"])
        held = await access.reserve(
            f"user:{user}", "images", (limit - 40) * MILLI, limit * MILLI
        )  # 40 images left today
        assert await access.commit(held)  # type: ignore[arg-type]
        await access.close()

        async def image(i: int) -> int:
            async with session.get(f"{nodes[i % 2].url}/api/image", params=PAGE, headers=auth) as resp:
                await resp.read()
                return resp.status

        statuses = await asyncio.gather(*(image(i) for i in range(120)))
        assert (statuses.count(200), statuses.count(429)) == (40, 80)

        address = {"X-Forwarded-For": f"203.0.113.{time.time_ns() % 250 + 1}"}  # anonymous: 60 requests an hour

        async def listing(i: int) -> int:
            async with session.get(f"{nodes[i % 2].url}/api/books", headers=address) as resp:
                await resp.read()
                return resp.status

        statuses = await asyncio.gather(*(listing(i) for i in range(100)))
        assert (statuses.count(200), statuses.count(429)) == (60, 40)


async def test_a_snapshot_published_while_serving_reaches_both_without_a_failed_request(
    cluster: dict[str, Any], demo_library: dict[str, Any], tmp_path: Path
) -> None:
    nodes: list[Node] = cluster["nodes"]
    auth = {"Authorization": f"Bearer {cluster['key']}"}
    seen: list[list[int]] = [[], []]
    failures: list[str] = []
    publishing = True

    async def load(session: aiohttp.ClientSession, which: int) -> None:
        while publishing or seen[which][-1] != 2:
            async with session.get(f"{nodes[which].url}/api/books", headers=auth) as resp:
                body = await resp.json()
                if resp.status != 200:
                    failures.append(f"node {which}: {resp.status} {body}")
                    return
                seen[which].append(body["total"])
            await asyncio.sleep(0.2)  # two loaders stay under the key's 1,000 a minute however long ingest takes

    async with aiohttp.ClientSession() as session:
        for node in nodes:
            await node.ready(session)
        # A bound that only a node stuck on the old snapshot reaches (the ingest between takes seconds, more when the
        # machine is busy): not a measure of speed.
        loads = [asyncio.create_task(asyncio.wait_for(load(session, i), 300)) for i in (0, 1)]
        while not all(seen) and not any(task.done() for task in loads):  # both answered from the first snapshot
            await asyncio.sleep(0.05)
        manifest = small_manifest(demo_library["manifest"], tmp_path / "small.json")
        await asyncio.to_thread(run, manifest, cluster["env"])  # adds a book and publishes a new snapshot
        nodes[1].proc.send_signal(signal.SIGHUP)  # node b never polls: it takes the snapshot on the signal
        publishing = False
        await asyncio.gather(*loads)
    assert failures == []
    for totals in seen:
        assert totals[0] == 1 and totals[-1] == 2
        assert totals == sorted(totals)  # each node switched once and never went back
    assert os.listdir(tmp_path / "node-a" / "snapshots") == os.listdir(tmp_path / "node-b" / "snapshots")
