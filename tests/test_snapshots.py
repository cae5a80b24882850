"""Catalog snapshots: published consistently and verifiably, pulled on start and on a check, switched atomically."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from imagesvc.app import build_app
from imagesvc.catalog import Catalog
from imagesvc.catalog.api_keys import create_key
from imagesvc.catalog.snapshots import SnapshotCorrupt, publish_snapshot, read_latest
from imagesvc.services import Services
from imagesvc.storage.local import LocalStore
from imagesvc.web.follow import SNAPSHOTS
from imagesvc.web.generations import Generation, Generations
from tests.library import copy_library, run_ingest, settings_for

PREFIX = "snapshots"


@pytest.fixture
def publisher(demo_library: dict[str, Any], tmp_path: Path) -> Path:
    """The ingest host's data dir: a private copy of the demo library."""
    return copy_library(demo_library["data"], tmp_path / "publisher")


def node_dir(publisher: Path, root: Path) -> Path:
    """A serving node's own data dir that shares the publisher's object store (a symlink stands in for S3)."""
    root.mkdir()
    os.symlink(publisher / "store", root / "store")
    return root


def publish(publisher: Path) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        store = LocalStore(publisher / "store")
        try:
            return await publish_snapshot(store, PREFIX, publisher)
        finally:
            await store.close()

    return asyncio.run(go())


async def book_total(client: TestClient) -> int:
    resp = await client.get("/api/books")
    assert resp.status == 200
    return int((await resp.json())["total"])


def test_published_files_match_the_manifest_and_the_catalog(publisher: Path) -> None:
    manifest = publish(publisher)
    root = publisher / "store" / PREFIX
    latest = json.loads((root / "LATEST").read_bytes())
    assert latest["version"] == manifest["version"]
    body = (root / manifest["version"] / "manifest.json").read_bytes()
    assert hashlib.sha256(body).hexdigest() == latest["manifest_sha256"]
    for name, want in manifest["files"].items():
        data = (root / manifest["version"] / name).read_bytes()
        assert (hashlib.sha256(data).hexdigest(), len(data)) == (want["sha256"], want["size"])
    copy, live = Catalog(root / manifest["version"] / "catalog.sqlite3"), Catalog(publisher / "catalog.sqlite3")
    try:
        assert copy.counts() == live.counts()
        assert copy.query_all("SELECT * FROM renditions ORDER BY 1, 2") == live.query_all(
            "SELECT * FROM renditions ORDER BY 1, 2"
        )
    finally:
        copy.close()
        live.close()


def test_old_versions_are_pruned(publisher: Path) -> None:
    versions = [publish(publisher)["version"] for _ in range(5)]

    async def stored() -> set[str]:
        store = LocalStore(publisher / "store")
        try:
            return {info.key.split("/")[1] async for info in store.list(f"{PREFIX}/")}
        finally:
            await store.close()

    assert asyncio.run(stored()) == {"LATEST", *versions[-3:]}


async def test_node_serves_the_snapshot_and_switches_to_a_new_one(
    publisher: Path, tmp_path: Path, demo_library: dict[str, Any], aiohttp_client: Any
) -> None:
    await asyncio.to_thread(publish, publisher)
    node = node_dir(publisher, tmp_path / "node")
    client = await aiohttp_client(build_app(settings_for(node, snapshot_prefix=PREFIX, snapshot_poll_seconds=0)))
    follower = client.server.app[SNAPSHOTS]
    first = follower.version
    assert first and await book_total(client) == 4  # the node's own catalog is empty: these came from the snapshot

    # A new book and a new key on the ingest host reach the node with the next snapshot, not before.
    broken = demo_library["manifest"].parent / "broken" / "broken-manifest.json"
    await asyncio.to_thread(run_ingest, broken, settings_for(publisher))
    catalog = Catalog(publisher / "catalog.sqlite3")
    key, _ = create_key(catalog, "full", "snapshot test")
    catalog.close()
    auth = {"Authorization": f"Bearer {key}"}
    assert (await client.get("/api/books", headers=auth)).status == 401
    await asyncio.to_thread(publish, publisher)
    assert await follower.check()
    assert follower.version > first
    assert await book_total(client) == 5
    assert (await client.get("/api/books", headers=auth)).status == 200
    assert [p.name for p in (node / "snapshots").iterdir()] == [follower.version]  # the old folder is gone
    assert not await follower.check()  # nothing newer: nothing pulled


async def test_a_corrupt_snapshot_is_refused_and_the_old_one_kept(
    publisher: Path, tmp_path: Path, aiohttp_client: Any
) -> None:
    await asyncio.to_thread(publish, publisher)
    node = node_dir(publisher, tmp_path / "node")
    client = await aiohttp_client(build_app(settings_for(node, snapshot_prefix=PREFIX, snapshot_poll_seconds=0)))
    follower = client.server.app[SNAPSHOTS]
    served = follower.version
    manifest = await asyncio.to_thread(publish, publisher)
    tampered = publisher / "store" / PREFIX / manifest["version"] / "catalog.sqlite3"
    tampered.write_bytes(tampered.read_bytes()[:-4096])  # truncated in the store
    with pytest.raises(SnapshotCorrupt):
        await follower.check()
    assert follower.version == served
    assert await book_total(client) == 4
    assert sorted(p.name for p in (node / "snapshots").iterdir()) == [served]  # no half-downloaded folder left


async def test_pointer_that_names_no_version_is_refused(publisher: Path) -> None:
    store = LocalStore(publisher / "store")
    await store.put(f"{PREFIX}/LATEST", b'{"version": "../../etc"}')
    with pytest.raises(SnapshotCorrupt):
        await read_latest(store, PREFIX)
    await store.close()


def test_a_request_keeps_its_snapshot_and_the_old_one_closes_after_it(tmp_path: Path) -> None:
    closed: list[str] = []
    catalogs = {name: Catalog(tmp_path / f"{name}.sqlite3") for name in ("old", "new")}
    old = Generation("old", catalogs["old"], None, on_close=lambda g: closed.append(g.version))
    new = Generation("new", catalogs["new"], None, on_close=lambda g: closed.append(g.version))
    state = Generations(old)
    services = Services(None, catalogs["old"], None)  # type: ignore[arg-type]
    services.follow(state.active_pair)
    with state.pinned():
        state.swap(new)
        assert services.catalog is catalogs["old"]  # the request that started on "old" reads "old" to its end
        assert closed == []
    assert closed == ["old"]
    assert services.catalog is catalogs["new"]
    for catalog in catalogs.values():
        catalog.close()
