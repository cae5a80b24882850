"""Catalog snapshots move in bounded memory: publishing one uploads the catalog file in parts read from disk (a real
S3 multipart upload to moto), and a node's pull streams it to disk a chunk at a time, so neither side holds the file
whole. Each side runs in a process of its own whose peak resident memory is read at its end; the same processes
moving a small catalog (12 MiB: the same multipart path, three parts) are the reference, measured in the same test
(moto runs inside the test process, so memory cannot be measured there)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import secrets
import sqlite3
import subprocess
import sys
from pathlib import Path

from imagesvc.catalog import Catalog
from imagesvc.storage import ObjectInfo
from imagesvc.storage.s3 import S3Config, S3Store
from tests.servers import S3Server

MIB = 1 << 20
BIG = 96  # MiB of catalog
PART = 5 * MIB  # S3's smallest part; two in flight
# What the big catalog may add to the peak: two parts in flight, each held about twice more while it is sent (asyncio
# keeps what the socket has not taken yet), and the client's buffers; a third of the catalog.
SLACK = 32 * MIB

# One side of a snapshot's journey in a fresh interpreter; prints its peak resident memory (KiB) last: VmHWM, the peak
# of this program's own memory (getrusage's ru_maxrss would carry the forking test process's peak across exec).
_CHILD = """
import asyncio, json, os, sys
from pathlib import Path
from imagesvc.catalog.snapshots import fetch_snapshot, publish_snapshot, read_latest
from imagesvc.storage.s3 import S3Config, S3Store

async def main(side, prefix, folder):
    store = S3Store(S3Config(**json.loads(os.environ["SNAP_S3"])))
    try:
        if side == "publish":
            await publish_snapshot(store, prefix, Path(folder))
        else:
            await fetch_snapshot(store, prefix, await read_latest(store, prefix), Path(folder))
    finally:
        await store.close()

asyncio.run(main(*sys.argv[1:]))
print(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")))
"""


def _catalog(path: Path, mib: int) -> int:
    """A catalog file of about ``mib`` MiB (a table of incompressible rows beside the real schema)."""
    catalog = Catalog(path)
    try:
        with catalog.transaction() as conn:
            conn.execute("CREATE TABLE ballast (b BLOB)")
            for _ in range(mib):
                conn.execute("INSERT INTO ballast VALUES (?)", (os.urandom(MIB),))
        catalog.scalar("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        catalog.close()
    return path.stat().st_size


def _peak(config: dict[str, object], side: str, prefix: str, folder: Path) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, side, prefix, str(folder)],
        env=os.environ | {"SNAP_S3": json.dumps(config)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stdout.split()[-1]) * 1024


async def _in_store(config: dict[str, object], prefix: str = "") -> list[ObjectInfo]:
    """Create the bucket; the objects under ``prefix``."""
    store = S3Store(S3Config(**config))  # type: ignore[arg-type]
    try:
        await store.ensure_bucket()
        return [info async for info in store.list(prefix)] if prefix else []
    finally:
        await store.close()


def test_a_snapshot_bigger_than_the_bound_is_published_and_pulled_a_part_at_a_time(
    moto_server: S3Server, tmp_path: Path
) -> None:
    config = {
        "endpoint_url": moto_server.endpoint_url,
        "bucket": f"snap-{secrets.token_hex(4)}",
        "region": moto_server.region,
        "access_key": moto_server.access_key,
        "secret_key": moto_server.secret_key,
        "multipart_threshold": PART,
        "part_size": PART,
        "multipart_concurrency": 2,
    }
    asyncio.run(_in_store(config))
    peaks: dict[str, dict[str, int]] = {}
    size = 0
    for name, mib in (("small", 12), ("big", BIG)):
        host = tmp_path / name
        size = _catalog(host / "catalog.sqlite3", mib)
        peaks[name] = {"publish": _peak(config, "publish", name, host)}
        (host / "catalog.sqlite3").unlink()
        peaks[name]["pull"] = _peak(config, "pull", name, tmp_path / f"{name}-node")
        pulled = next((tmp_path / f"{name}-node").glob("*/catalog.sqlite3"))
        with contextlib.closing(sqlite3.connect(pulled)) as conn:
            assert conn.execute("SELECT count(*) FROM ballast").fetchone()[0] == mib
    assert size > 3 * SLACK
    # S3 names a multipart upload's part count in its ETag: the big catalog went up in parts read from the file.
    catalog = next(info for info in asyncio.run(_in_store(config, "big/")) if info.key.endswith("/catalog.sqlite3"))
    assert catalog.etag.endswith(f"-{math.ceil(catalog.size / PART)}"), catalog
    for side in ("publish", "pull"):
        grown = peaks["big"][side] - peaks["small"][side]
        assert grown < SLACK, f"{side}: {grown / MIB:.0f} MiB more for a {size / MIB:.0f} MiB catalog ({peaks})"
