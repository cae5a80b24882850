"""``Meter``, one request's budget holdings, on both real access backends: reserve before delivering, commit what
went out, refund what did not, HEAD counts nothing, uncapped pools are metered once delivered, a spent pool refuses
with the figures a caller reads, and a store that does not answer lets nothing metered out."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagesvc.access import MILLI, AccessState, AccessUnavailable
from imagesvc.access.identity import Caller
from imagesvc.access.meter import Meter
from imagesvc.access.redis import RedisAccess
from imagesvc.access.sqlite import SqliteAccess
from imagesvc.errors import RateLimited
from tests.servers import refused_port

ANON = Caller("anonymous", "ip:192.0.2.10", "anonymous")  # 500 images and 500 text pages a day
PAID = Caller("key", "key:paid01", "key:full")  # uncapped pools, still metered


async def images(access: AccessState, caller: Caller = ANON) -> tuple[int, int | None]:
    """The caller's images pool, exact: (thousandths counted, committed or pending; thousandths remaining)."""
    budget = caller.allowance.budget("images")
    state = await access.usage(caller.subject, "images", None if budget is None else budget * MILLI)
    return state.used, state.remaining


async def metered(access: AccessState, caller: Caller) -> list[tuple[str, int, int]]:
    """What the usage meter shows for the caller today: (pool, requests, units)."""
    return [(row["pool"], row["requests"], row["units"]) for row in await access.daily_usage(caller.subject, 1)]


async def test_a_delivered_reservation_is_counted_and_metered(access: AccessState) -> None:
    meter = Meter(access, ANON)
    assert await meter.reserve("images", 3) == 3
    assert await images(access) == (3 * MILLI, 497 * MILLI)  # held while the bytes go out
    assert meter.states["images"].remaining == 497
    await meter.settle(delivered=True)
    assert await images(access) == (3 * MILLI, 497 * MILLI)
    assert await metered(access, ANON) == [("images", 1, 3 * MILLI)]
    await meter.settle(delivered=True)  # settling twice counts nothing more
    assert await metered(access, ANON) == [("images", 1, 3 * MILLI)]


async def test_a_client_that_disconnects_gets_its_budget_back(access: AccessState) -> None:
    meter = Meter(access, ANON)
    await meter.reserve("images", 2)
    await meter.reserve_milli("text", 250)
    assert (await images(access))[0] == 2 * MILLI
    await meter.settle(delivered=False)
    assert await images(access) == (0, 500 * MILLI)
    assert await metered(access, ANON) == []


async def test_head_counts_nothing_but_answers_as_get_would(access: AccessState) -> None:
    head = Meter(access, ANON, delivers=False)
    assert await head.reserve("images", 5) == 5
    assert head.reservations == [] and head.states["images"].remaining == 500
    await head.settle(delivered=True)
    assert await images(access) == (0, 500 * MILLI) and await metered(access, ANON) == []
    spend = Meter(access, ANON)
    await spend.reserve("images", 500)
    await spend.settle(delivered=True)
    with pytest.raises(RateLimited) as refused:
        await Meter(access, ANON, delivers=False).reserve("images", 1)
    assert refused.value.details["used"] == 500 and refused.value.details["limit"] == 500
    assert int(refused.value.headers["Retry-After"]) >= 1


async def test_a_spent_pool_refuses_with_the_whole_units_a_caller_reads(access: AccessState) -> None:
    first = Meter(access, ANON)
    await first.reserve_milli("images", 499 * MILLI + 500)  # 499.5 images: half of one is left
    await first.settle(delivered=True)
    meter = Meter(access, ANON)
    with pytest.raises(RateLimited) as refused:
        await meter.reserve("images", 1)
    assert refused.value.status == 429 and refused.value.details["pool"] == "images"
    assert (refused.value.details["used"], refused.value.details["limit"]) == (500, 500)  # rounded against the caller
    assert int(refused.value.headers["Retry-After"]) >= 1
    assert meter.reservations == [] and (await images(access))[0] == 499 * MILLI + 500  # the refusal held nothing
    assert await meter.reserve_milli("images", 500) == 500  # an exact half still fits


async def test_a_partial_grant_holds_whole_pages_only(access: AccessState) -> None:
    first = Meter(access, ANON)
    await first.reserve_milli("images", 497 * MILLI + 500)  # 2.5 images left
    await first.settle(delivered=True)
    meter = Meter(access, ANON)
    assert await meter.reserve("images", 5, allow_partial=True) == 2
    assert (await images(access))[0] == 499 * MILLI + 500
    await meter.settle(delivered=True)
    assert await images(access) == (499 * MILLI + 500, 500)


async def test_uncapped_pools_reserve_nothing_and_meter_only_what_went_out(access: AccessState) -> None:
    served = Meter(access, PAID)
    assert await served.reserve("images", 700) == 700
    assert served.reservations == [] and served.uncapped == {"images": 700 * MILLI}
    await served.settle(delivered=True)
    assert await metered(access, PAID) == [("images", 1, 700 * MILLI)]
    dropped = Meter(access, PAID)
    await dropped.reserve("images", 9)
    await dropped.settle(delivered=False)
    assert await metered(access, PAID) == [("images", 1, 700 * MILLI)]


async def test_a_tool_calls_meter_joins_its_requests_and_settles_once(access: AccessState) -> None:
    request, call = Meter(access, ANON), Meter(access, ANON)
    await call.reserve("images", 4)
    request.adopt(call)
    assert call.reservations == [] and len(request.reservations) == 1
    await call.settle(delivered=False)  # the call's own meter holds nothing any more
    assert (await images(access))[0] == 4 * MILLI
    await request.settle(delivered=True)
    assert await metered(access, ANON) == [("images", 1, 4 * MILLI)]


async def test_nothing_below_one_unit_is_reserved(access: AccessState) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        await Meter(access, ANON).reserve("images", 0)
    with pytest.raises(ValueError, match="at least 1"):
        await Meter(access, ANON).reserve_milli("images", 0)


@pytest.fixture(params=["sqlite", "redis"])
async def dead_access(request: pytest.FixtureRequest, tmp_path: Path) -> AccessState:
    """A backend whose store does not answer: a folder where the SQLite file should be, or no Redis listening."""
    with refused_port() as port:
        if request.param == "sqlite":
            (tmp_path / "access.sqlite3").mkdir()
            dead: AccessState = SqliteAccess(tmp_path / "access.sqlite3")
        else:
            dead = RedisAccess(f"redis://127.0.0.1:{port}/0")
        yield dead  # type: ignore[misc]
        await dead.close()


@pytest.mark.parametrize(("caller", "delivers"), [(ANON, True), (ANON, False), (PAID, True), (PAID, False)])
async def test_an_outage_lets_nothing_metered_out(dead_access: AccessState, caller: Caller, delivers: bool) -> None:
    """Capped or uncapped, GET or HEAD: with the store down the meter refuses (503), it never grants blind."""
    meter = Meter(dead_access, caller, delivers=delivers)
    with pytest.raises(AccessUnavailable) as caught:
        await meter.reserve("images", 1)
    assert caught.value.status == 503 and caught.value.headers["Retry-After"]
    assert meter.reservations == [] and meter.uncapped == {}
