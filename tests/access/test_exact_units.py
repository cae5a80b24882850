"""Exact units through the ``Meter`` on every real backend: thousandths kept exactly, whole units shown rounded
against the caller, partial grants of whole pages, and an unreachable store refusing uncapped deliveries too."""

from __future__ import annotations

import pytest

from imagesvc.access import MILLI, AccessUnavailable
from imagesvc.access.identity import Caller
from imagesvc.access.meter import Meter
from imagesvc.access.redis import RedisAccess
from imagesvc.errors import RateLimited
from tests.access.conftest import MakeAccess
from tests.servers import refused_port

ANONYMOUS = Caller("anonymous", "ip:198.51.100.4", "anonymous")  # 500 images and 500 pages a day
FULL_KEY = Caller("key", "key:full1", "key:full", key_ref="full1")  # uncapped


async def test_fractions_add_up_exactly_and_show_as_whole_units(make_access: MakeAccess) -> None:
    access = make_access()
    for _ in range(1000):  # a thousand 512 px tiles at 66 thousandths each: 66 units, not 0 and not 1,000
        meter = Meter(access, ANONYMOUS)
        assert await meter.reserve_milli("images", 66) == 66
        await meter.settle(True)
    state = await Meter(access, ANONYMOUS).state("images")
    assert (state.used, state.remaining) == (66, 434)
    exact = await access.usage(ANONYMOUS.subject, "images", 500 * MILLI)
    assert exact.used == 66_000
    meter = Meter(access, ANONYMOUS)
    assert await meter.reserve_milli("images", 1) == 1
    await meter.settle(True)
    state = await Meter(access, ANONYMOUS).state("images")
    assert (state.used, state.remaining) == (67, 433)  # 66.001 used: what is left is rounded down


async def test_less_than_a_unit_left_refuses_a_whole_unit_but_not_its_fraction(make_access: MakeAccess) -> None:
    access = make_access()
    await access.commit(await access.reserve(ANONYMOUS.subject, "images", 499_500, 500 * MILLI))
    meter = Meter(access, ANONYMOUS)
    with pytest.raises(RateLimited) as refused:
        await meter.reserve("images", 1)
    assert (refused.value.details["used"], refused.value.details["limit"]) == (500, 500)
    assert refused.value.details["retry_after_seconds"] > 0
    assert await meter.reserve_milli("images", 500) == 500  # exactly what is left
    with pytest.raises(RateLimited):
        await meter.reserve_milli("images", 1)


async def test_a_partial_grant_is_whole_pages(make_access: MakeAccess) -> None:
    access = make_access()
    await access.commit(await access.reserve(ANONYMOUS.subject, "text", 497_500, 500 * MILLI))  # 2.5 pages left
    meter = Meter(access, ANONYMOUS)
    assert await meter.reserve("text", 25, allow_partial=True) == 2
    await meter.settle(True)
    left = await access.usage(ANONYMOUS.subject, "text", 500 * MILLI)
    assert left.remaining == 500  # the half page was not taken
    with pytest.raises(RateLimited):
        await Meter(access, ANONYMOUS).reserve("text", 25, allow_partial=True)


async def test_uncapped_deliveries_are_metered_exactly(make_access: MakeAccess) -> None:
    access = make_access()
    meter = Meter(access, FULL_KEY)
    for price in (66, 17, 12_000):
        assert await meter.reserve_milli("images", price) == price
    await meter.settle(True)
    rows = await access.daily_usage(FULL_KEY.subject, 1)
    assert [(r["pool"], r["requests"], r["units"]) for r in rows] == [("images", 1, 12_083)]


async def test_an_unreachable_store_refuses_uncapped_deliveries_too() -> None:
    with refused_port() as port:
        access = RedisAccess(f"redis://127.0.0.1:{port}/0")
        try:
            with pytest.raises(AccessUnavailable):
                await Meter(access, FULL_KEY).reserve_milli("images", 66)  # nothing to reserve: it cannot be metered
            with pytest.raises(AccessUnavailable):
                await Meter(access, FULL_KEY, delivers=False).reserve("images", 1)  # a HEAD neither
        finally:
            await access.close()
