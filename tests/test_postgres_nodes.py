"""Many nodes, one truth: two real ``imagesvc serve`` processes and ``imagesvc ingest`` runs over one PostgreSQL
catalog and one S3 server (moto), with no catalog copy on any node.

A revoked key is refused by both nodes within a second of ``imagesvc keys revoke`` returning; a book ingested while
they serve is listed and found by gallery search on both without a restart; a withdrawn book is gone from both at
once, each node updating its gallery table for the books written rather than reading it whole again. PostgreSQL
stopped mid-traffic gives clear 503 ``unavailable`` answers (nothing metered is delivered) and the nodes recover by
themselves when it is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from imagesvc.catalog import writes as w
from imagesvc.catalog.postgres import PostgresCatalog
from imagesvc.storage import StoreUnavailable
from imagesvc.storage.s3 import S3Config, S3Store
from tests.servers import PostgresServer, S3Server, create_database
from tests.test_ingest_kills import IMAGESVC, ingest_env
from tests.test_scale_out import Node, _empty


def manifest_of(demo_manifest: Path, slugs: list[str], out: Path, collections: bool = False) -> Path:
    """A manifest of the demo books ``slugs`` (image paths made absolute), optionally with the demo collections
    whose items all lie in those books."""
    demo = json.loads(demo_manifest.read_text())
    books = [b for b in demo["books"] if b["slug"] in slugs]
    for book in books:
        for page in book["pages"]:
            if page.get("image"):
                page["image"] = str(demo_manifest.parent / page["image"])
    cols = [
        c for c in demo.get("collections", []) if collections and all(i["book"] in slugs for i in c.get("items", []))
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"version": 1, "books": books, "collections": cols}))
    return out


def cli(env: dict[str, str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([IMAGESVC, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False)


def ingest(env: dict[str, str], manifest: Path) -> None:
    done = cli(env, "ingest", str(manifest), "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture
def shared(postgres_server: PostgresServer, moto_server: S3Server) -> Iterator[dict[str, str]]:
    """The settings every process of one deployment shares: one PostgreSQL database, one bucket."""
    bucket = f"pg-{secrets.token_hex(5)}"
    url = create_database(postgres_server, f"nodes_{secrets.token_hex(5)}")
    yield {
        "IMAGESVC_CATALOG": "postgres",
        "IMAGESVC_DATABASE_URL": url,
        "IMAGESVC_STORAGE": "s3",
        "IMAGESVC_S3_ENDPOINT": moto_server.endpoint_url,
        "IMAGESVC_S3_BUCKET": bucket,
        "IMAGESVC_S3_ACCESS_KEY": moto_server.access_key,
        "IMAGESVC_S3_SECRET_KEY": moto_server.secret_key,
        "IMAGESVC_IMAGE_HOST": "https://img.example",
        "IMAGESVC_TEXT_MODEL": "off",
        "IMAGESVC_LOG_LEVEL": "warning",
    }
    config = S3Config(moto_server.endpoint_url, bucket, moto_server.region, moto_server.access_key, "x")
    with contextlib.suppress(StoreUnavailable):  # a test that never created the bucket
        asyncio.run(_empty(S3Store(config)))


@pytest.fixture
def nodes(shared: dict[str, str], demo_library: dict[str, Any], tmp_path: Path) -> Iterator[list[Node]]:
    """Two nodes serving the Sefer book (ingested first), each with an empty data dir of its own."""
    ingest(
        ingest_env(tmp_path / "ingester", **shared), manifest_of(demo_library["manifest"], [SEFER], tmp_path / "a.json")
    )
    started = [Node(ingest_env(tmp_path / f"node-{n}", **shared), tmp_path / f"node-{n}.log") for n in "ab"]
    try:
        yield started
    finally:
        for node in started:
            node.stop()


SEFER = "demo-sefer-maarekhet-ha-kokhavim"
SPECULUM = "demo-speculum-fornacum"


async def _status(session: aiohttp.ClientSession, url: str, **kwargs: Any) -> tuple[int, Any]:
    async with session.get(url, **kwargs) as resp:
        body = await resp.read()
        try:
            return resp.status, json.loads(body)
        except ValueError:
            return resp.status, body.decode(errors="replace")


async def test_two_nodes_see_keys_books_and_withdrawals_at_once(
    nodes: list[Node], shared: dict[str, str], demo_library: dict[str, Any], tmp_path: Path
) -> None:
    operator = ingest_env(tmp_path / "operator", **shared)
    async with aiohttp.ClientSession() as session:
        for node in nodes:
            await node.ready(session)
        created = cli(operator, "keys", "create", "--tier", "full", "--json")
        assert created.returncode == 0, created.stderr
        issued = json.loads(created.stdout)
        auth = {"Authorization": f"Bearer {issued['key']}"}
        for node in nodes:
            assert (await _status(session, f"{node.url}/api/books/{SEFER}", headers=auth))[0] == 200

        # A revoked key: refused by both nodes within 1 s of `keys revoke` returning.
        assert cli(operator, "keys", "revoke", issued["id"]).returncode == 0
        revoked_at = time.monotonic()
        for node in nodes:
            while (status := (await _status(session, f"{node.url}/api/books/{SEFER}", headers=auth)))[0] != 401:
                assert time.monotonic() - revoked_at < 1.0, status
                await asyncio.sleep(0.05)
        assert time.monotonic() - revoked_at < 1.0

        # Gallery search state is built from the catalog before the new book exists...
        for node in nodes:
            status, body = await _status(session, f"{node.url}/api/gallery?query=athanor")
            assert status == 200 and SPECULUM not in json.dumps(body)
            assert (await _status(session, f"{node.url}/api/books/{SPECULUM}"))[0] == 404
        # ...and a book ingested while both serve is listed and found by search on both, without a restart.
        ingest(
            ingest_env(tmp_path / "ingester-2", **shared),
            manifest_of(demo_library["manifest"], [SPECULUM], tmp_path / "b.json"),
        )
        committed = time.monotonic()
        for node in nodes:
            status, body = await _status(session, f"{node.url}/api/books/{SPECULUM}")
            assert status == 200, body
            status, body = await _status(session, f"{node.url}/api/gallery?query=athanor")
            assert status == 200 and SPECULUM in json.dumps(body), body
        assert time.monotonic() - committed < 5.0

        # A withdrawn book is gone from both at once, from its page and from search.
        catalog = PostgresCatalog(shared["IMAGESVC_DATABASE_URL"])
        try:
            with catalog.transaction() as conn:
                assert w.withdraw_book(conn, catalog.find_book(SPECULUM)["id"])  # type: ignore[index]
        finally:
            catalog.close()
        for node in nodes:
            assert (await _status(session, f"{node.url}/api/books/{SPECULUM}"))[0] == 404
            status, body = await _status(session, f"{node.url}/api/gallery?query=athanor")
            assert status == 200 and SPECULUM not in json.dumps(body)
            # Neither node read its whole gallery table again: it updated the books that were written.
            table = (await _status(session, f"{node.url}/health"))[1]["search"]["gallery_table"]
            assert table["read_whole"] == 1 and table["updated_by_book"] >= 2, table
    for name in ("node-a", "node-b"):  # no node holds a catalog copy
        assert not list((tmp_path / name).glob("catalog.sqlite3*")), list((tmp_path / name).iterdir())


async def test_postgres_stopped_mid_traffic_gives_503_then_recovers_without_a_restart(
    nodes: list[Node], shared: dict[str, str], postgres_server: PostgresServer, tmp_path: Path
) -> None:
    operator = ingest_env(tmp_path / "operator", **shared)
    issued = json.loads(cli(operator, "keys", "create", "--tier", "full", "--json").stdout)
    auth = {"Authorization": f"Bearer {issued['key']}"}
    quote = f"/api/books/{SEFER}/quote?page=1"
    async with aiohttp.ClientSession() as session:
        for node in nodes:
            await node.ready(session)
            assert (await _status(session, node.url + quote, headers=auth))[0] == 200
        postgres_server.stop("immediate")
        try:
            for node in nodes:
                for path in (f"/api/books/{SEFER}", quote, "/api/gallery?query=sun", f"/book/{SEFER}"):
                    started = time.monotonic()
                    status, body = await _status(session, node.url + path, headers=auth)
                    assert status == 503, (path, status, body)  # nothing metered is delivered while it is down
                    if isinstance(body, dict):
                        assert body["error"] == "unavailable" and "catalog database" in body["message"], body
                    assert time.monotonic() - started < 8.0
                # answered fast once the outage is known: no request waits for the database
                started = time.monotonic()
                assert (await _status(session, f"{node.url}/api/books/{SEFER}"))[0] == 503
                assert time.monotonic() - started < 0.5
                async with session.get(f"{node.url}/health") as resp:
                    assert resp.status in (200, 503)
        finally:
            postgres_server.start()
        back = time.monotonic()
        for node in nodes:
            while (status := (await _status(session, node.url + quote, headers=auth)))[0] != 200:
                assert time.monotonic() - back < 15.0, status
                await asyncio.sleep(0.2)
        for node in nodes:
            assert node.proc.poll() is None  # the same processes: recovered, not restarted


async def test_slow_clients_cannot_exhaust_the_catalog_pool(nodes: list[Node]) -> None:
    """A catalog connection is held for one statement, never while a response is being sent: far more stalled
    clients than the pool has connections (10) leave a node answering everyone else at once."""
    node = nodes[0]
    async with aiohttp.ClientSession() as session:
        await node.ready(session)
        stalled = []
        for _ in range(40):  # each asks for a book's text and never reads the answer
            reader, writer = await asyncio.open_connection("127.0.0.1", node.port)
            writer.write(f"GET /api/books/{SEFER}/text HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            await writer.drain()
            stalled.append((reader, writer))
        try:
            # The event, not a sleep: every stalled client's answer has begun (its head arrived; its body is never
            # read). A bound only a hang reaches.
            async with asyncio.timeout(120):
                for reader, _ in stalled:
                    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
            started = time.monotonic()
            for _ in range(5):
                assert (await _status(session, f"{node.url}/api/books/{SEFER}"))[0] == 200
            assert time.monotonic() - started < 2.0
        finally:
            for _, writer in stalled:
                writer.close()
