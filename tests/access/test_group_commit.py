"""The usage meter under concurrency: records written together stay exact on every backend, and a failed write
reaches every caller whose record it held."""

from __future__ import annotations

import asyncio

import pytest

from imagesvc.access import AccessUnavailable
from imagesvc.access.group import GroupCommit, MeterRecord
from imagesvc.access.redis import RedisAccess
from tests.access.conftest import MakeAccess

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


async def test_a_batch_touches_one_hash_slot_per_script_call(redis_cluster_node: str) -> None:
    access = RedisAccess(redis_cluster_node)
    try:
        subjects = [f"key:{name}" for name in "abcdefgh"]  # eight subjects: eight hash slots
        await asyncio.gather(*(access.record(s, "images", 1, T0) for s in subjects for _ in range(5)))
        for subject in subjects:
            assert await access.daily_usage(subject, 1, T0) == [
                {"date": "2027-01-15", "pool": "images", "requests": 5, "units": 5}
            ]
    finally:
        await access.close()
