"""Request-limit contract (sliding-window log) on every real backend: exact under bursts, recovers as hits age."""

from __future__ import annotations

import asyncio

from imagesvc.access import AccessState, Allowed, Denied
from tests.access.conftest import MakeAccess

T0 = 1_800_000_000.0


async def test_burst_allows_exactly_the_limit_across_instances(make_access: MakeAccess) -> None:
    first, second = make_access(), make_access()
    hits = [(first if i % 2 else second).hit("ip:203.0.113.7", 60, 3600) for i in range(300)]
    results = await asyncio.gather(*hits)
    assert sum(isinstance(r, Allowed) for r in results) == 60
    refused = [r for r in results if isinstance(r, Denied)]
    assert all(r.limit == 60 and r.used == 60 and 1 <= r.retry_after_seconds <= 3600 for r in refused)


async def test_limit_recovers_as_the_window_slides(access: AccessState) -> None:
    seen = [await access.hit("key:free1", 3, 60, T0 + offset) for offset in (0, 10, 20)]
    assert [r.remaining for r in seen if isinstance(r, Allowed)] == [2, 1, 0]
    refused = await access.hit("key:free1", 3, 60, T0 + 30)
    assert isinstance(refused, Denied) and refused.retry_after_seconds == 30
    assert isinstance(await access.hit("key:free1", 3, 60, T0 + 59), Denied)
    back = await access.hit("key:free1", 3, 60, T0 + 60)
    assert isinstance(back, Allowed) and back.remaining == 0
    assert back.reset == 10, "the oldest counted hit (T0 + 10) ages out 10 s later"
    assert isinstance(await access.hit("key:free1", 3, 60, T0 + 69), Denied)
    assert isinstance(await access.hit("key:free1", 3, 60, T0 + 200), Allowed)


async def test_refused_hits_are_not_counted(access: AccessState) -> None:
    assert isinstance(await access.hit("ip:192.0.2.1", 1, 60, T0), Allowed)
    for offset in range(1, 30):
        assert isinstance(await access.hit("ip:192.0.2.1", 1, 60, T0 + offset), Denied)
    assert isinstance(await access.hit("ip:192.0.2.1", 1, 60, T0 + 60), Allowed)


async def test_subjects_and_windows_are_independent(access: AccessState) -> None:
    assert isinstance(await access.hit("ip:192.0.2.2", 1, 60, T0), Allowed)
    assert isinstance(await access.hit("ip:192.0.2.2", 1, 60, T0), Denied)
    assert isinstance(await access.hit("ip:192.0.2.3", 1, 60, T0), Allowed)
    assert isinstance(await access.hit("ip:192.0.2.2", 1, 3600, T0), Allowed)


async def test_unlimited_callers_are_always_allowed(access: AccessState) -> None:
    results = [await access.hit("crawler:googlebot", None, 60, T0) for _ in range(5)]
    assert all(isinstance(r, Allowed) and r.remaining is None for r in results)
