"""The usage meter under concurrency: records written together stay exact on every backend, and a failed write
reaches every caller whose record it held."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagesvc.access import AccessUnavailable
from imagesvc.access.group import GroupCommit, MeterRecord
from imagesvc.access.redis import RedisAccess
from tests.access.conftest import MakeAccess, free_port

T0 = 1_800_000_000.0  # 2027-01-15 08:00 UTC
DAY = 86_400


async def test_a_burst_of_records_is_metered_exactly(make_access: MakeAccess) -> None:
    first, second = make_access(), make_access()  # two app instances sharing one store
    calls = [
        access.record(subject, pool, units, now)
        for access in (first, second)
        for subject, pool, units, now in (
            ("key:burst", "images", 1, T0),
            ("key:burst", "text", 3, T0),
            ("key:burst", "images", 1, T0 - DAY),
            ("key:other", "images", 2, T0),
        )
        for _ in range(150)
    ]
    await asyncio.gather(*calls)
    assert await first.daily_usage("key:burst", 2, T0) == [
        {"date": "2027-01-14", "pool": "images", "requests": 300, "units": 300},
        {"date": "2027-01-15", "pool": "images", "requests": 300, "units": 300},
        {"date": "2027-01-15", "pool": "text", "requests": 300, "units": 900},
    ]
    assert await second.daily_usage("key:other", 1, T0) == [
        {"date": "2027-01-15", "pool": "images", "requests": 300, "units": 600}
    ]


async def test_a_record_whose_caller_went_away_is_still_written(make_access: MakeAccess) -> None:
    access = make_access()
    waiting = [asyncio.create_task(access.record("key:gone", "images", 1, T0)) for _ in range(20)]
    await asyncio.sleep(0)  # every record is queued; now their callers give up
    for task in waiting[::2]:
        task.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)
    await access.close()  # close waits for queued records
    assert await make_access().daily_usage("key:gone", 1, T0) == [
        {"date": "2027-01-15", "pool": "images", "requests": 20, "units": 20}
    ]


async def test_batches_form_while_a_write_is_in_flight_and_failures_reach_their_callers() -> None:
    batches: list[list[MeterRecord]] = []
    gate = asyncio.Event()
    failing = {"on": False}

    async def write(records: list[MeterRecord]) -> None:
        batches.append(records)
        await gate.wait()
        if failing["on"]:
            raise AccessUnavailable("the access store is down")

    group = GroupCommit(write)
    records = [MeterRecord(f"s{i}", "images", 1, T0) for i in range(5)]
    first = asyncio.create_task(group.submit(records[0]))
    await asyncio.sleep(0)
    rest = [asyncio.create_task(group.submit(r)) for r in records[1:]]
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(first, *rest)
    assert batches == [records[:1], records[1:]]  # the four that queued behind the first went out together

    failing["on"] = True
    doomed = [asyncio.create_task(group.submit(r)) for r in records[:3]]
    results = await asyncio.gather(*doomed, return_exceptions=True)
    assert all(isinstance(r, AccessUnavailable) for r in results)

    failing["on"] = False
    await group.submit(records[4])  # the next write goes ahead once the store is back
    assert batches[-1] == [records[4]]
    await group.flush()


async def test_flush_waits_for_records_already_queued() -> None:
    written: list[MeterRecord] = []

    async def write(records: list[MeterRecord]) -> None:
        await asyncio.sleep(0.01)
        written.extend(records)

    group = GroupCommit(write)
    tasks = [asyncio.create_task(group.submit(MeterRecord("s", "text", 1, T0))) for _ in range(3)]
    await asyncio.sleep(0)
    await group.flush()
    assert len(written) == 3
    await asyncio.gather(*tasks)


@pytest.mark.parametrize("started", [False, True], ids=["before-it-ran", "mid-write"])
async def test_a_cancelled_writer_never_leaves_a_caller_waiting(started: bool) -> None:
    async def write(records: list[MeterRecord]) -> None:
        await asyncio.sleep(3600)

    group = GroupCommit(write)
    task = asyncio.create_task(group.submit(MeterRecord("s", "text", 1, T0)))
    for _ in range(3 if started else 1):
        await asyncio.sleep(0)
    writer = group._writer
    assert writer is not None
    writer.cancel()  # what a shutdown that cancels every task does
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 1)
    await group.flush()  # returns: nothing is left to wait for
    assert group._writer is None


@pytest.fixture
def cluster_node(tmp_path: Path) -> Iterator[str]:
    """A one-node Redis Cluster holding every slot: it refuses any command or script whose keys span slots."""
    binary = shutil.which("redis-server")
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("redis-server is not installed (apt-get install redis-server)")
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", tmp_path,
         "--cluster-enabled", "yes", "--cluster-config-file", str(tmp_path / "nodes.conf")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip

    def command(line: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(line)
            return sock.recv(4096)

    deadline = time.monotonic() + 10
    while True:
        try:
            if command(b"PING\r\n").startswith(b"+PONG"):
                break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"redis-server (cluster mode) did not answer PING on port {port}")
        time.sleep(0.05)
    try:
        assert command(b"CLUSTER ADDSLOTSRANGE 0 16383\r\n").startswith(b"+OK")
        while b"cluster_state:ok" not in command(b"CLUSTER INFO\r\n"):
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def test_a_batch_touches_one_hash_slot_per_script_call(cluster_node: str) -> None:
    access = RedisAccess(cluster_node)
    try:
        subjects = [f"key:{name}" for name in "abcdefgh"]  # eight subjects: eight hash slots
        await asyncio.gather(*(access.record(s, "images", 1, T0) for s in subjects for _ in range(5)))
        for subject in subjects:
            assert await access.daily_usage(subject, 1, T0) == [
                {"date": "2027-01-15", "pool": "images", "requests": 5, "units": 5}
            ]
    finally:
        await access.close()
