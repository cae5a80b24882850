"""Budget contract, run against every real backend: exact under bursts, refunds, lapses, rolling window, retries."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from imagesvc.access import PENDING_TTL, AccessState, Denied, Reservation
from imagesvc.access.redis import RedisAccess
from imagesvc.access.sqlite import SqliteAccess
from tests.access.conftest import MakeAccess

T0 = 1_800_000_000.0  # minute-aligned instant the tests travel from
DAY = 86_400


async def _reserve_and_commit(access: AccessState, subject: str, limit: int | None) -> bool:
    got = await access.reserve(subject, "images", 1, limit)
    if isinstance(got, Denied):
        return False
    assert await access.commit(got)
    return True


async def test_burst_grants_exactly_the_limit(access: AccessState) -> None:
    results = await asyncio.gather(*(_reserve_and_commit(access, "ip:203.0.113.7", 500) for _ in range(1000)))
    assert sum(results) == 500
    state = await access.usage("ip:203.0.113.7", "images", 500)
    assert (state.used, state.remaining) == (500, 0)
    assert state.reset_seconds > 0


async def test_two_instances_share_one_exact_budget(make_access: MakeAccess) -> None:
    first, second = make_access(), make_access()
    attempts = [_reserve_and_commit(first if i % 2 else second, "user:42", 500) for i in range(1000)]
    results = await asyncio.gather(*attempts)
    assert sum(results) == 500
    assert (await second.usage("user:42", "images", 500)).used == 500
    assert isinstance(await first.reserve("user:42", "images", 1, 500), Denied)


async def test_refund_frees_the_budget(access: AccessState) -> None:
    held = [await access.reserve("ip:198.51.100.1", "images", 1, 3, T0) for _ in range(3)]
    assert all(isinstance(r, Reservation) for r in held)
    assert isinstance(await access.reserve("ip:198.51.100.1", "images", 1, 3, T0), Denied)
    assert isinstance(held[0], Reservation)
    assert await access.refund(held[0])
    assert not await access.refund(held[0]), "a second refund must not free a second unit"
    assert isinstance(await access.reserve("ip:198.51.100.1", "images", 1, 3, T0), Reservation)


async def test_lapsed_reservation_frees_the_budget_and_cannot_be_committed(access: AccessState) -> None:
    crashed = await access.reserve("key:k1", "text", 2, 2, T0)
    assert isinstance(crashed, Reservation)
    assert isinstance(await access.reserve("key:k1", "text", 1, 2, T0 + PENDING_TTL - 1), Denied)
    later = await access.reserve("key:k1", "text", 2, 2, T0 + PENDING_TTL)
    assert isinstance(later, Reservation) and later.units == 2
    assert not await access.commit(crashed, now=T0 + PENDING_TTL + 1)
    assert await access.commit(later, now=T0 + PENDING_TTL + 1)
    assert (await access.usage("key:k1", "text", 2, T0 + PENDING_TTL + 2)).used == 2


async def test_an_extended_reservation_outlives_its_first_lifetime_and_is_committed(access: AccessState) -> None:
    """A delivery still being written renews its reservation: it keeps the units past the first lifetime and its
    commit counts; a settled or lapsed reservation cannot be brought back by renewing it."""
    held = await access.reserve("key:k2", "images", 1, 1, T0)
    assert isinstance(held, Reservation)
    assert await access.extend(held, now=T0 + PENDING_TTL - 1)
    assert isinstance(await access.reserve("key:k2", "images", 1, 1, T0 + PENDING_TTL + 1), Denied)  # still held
    assert await access.commit(held, now=T0 + 2 * PENDING_TTL - 2)
    assert (await access.usage("key:k2", "images", 1, T0 + 2 * PENDING_TTL)).used == 1
    assert not await access.extend(held, now=T0 + 2 * PENDING_TTL), "a settled reservation cannot be renewed"
    lapsed = await access.reserve("key:k3", "images", 1, 1, T0)
    assert isinstance(lapsed, Reservation)
    assert not await access.extend(lapsed, now=T0 + PENDING_TTL + 1), "a lapsed reservation cannot be renewed"
    assert not await access.commit(lapsed, now=T0 + PENDING_TTL + 2)


async def test_usage_ages_out_after_24_hours(access: AccessState) -> None:
    got = await access.reserve("ip:203.0.113.9", "images", 5, 5, T0 + 30)
    assert isinstance(got, Reservation)
    assert await access.commit(got, now=T0 + 31)
    # One-minute buckets, rounded up: usage made during the minute at T0 counts until T0 + 60 s + 24 h.
    assert (await access.usage("ip:203.0.113.9", "images", 5, T0 + DAY + 59)).used == 5
    assert isinstance(await access.reserve("ip:203.0.113.9", "images", 1, 5, T0 + DAY + 59), Denied)
    after = await access.usage("ip:203.0.113.9", "images", 5, T0 + DAY + 60)
    assert (after.used, after.remaining, after.reset_seconds) == (0, 5, 0)
    assert isinstance(await access.reserve("ip:203.0.113.9", "images", 5, 5, T0 + DAY + 60), Reservation)


async def test_retry_after_is_the_instant_a_unit_frees_up(access: AccessState) -> None:
    subject = "ip6:2001:db8:1:2::/64"
    for at, units in ((T0 + 10, 1), (T0 + 70, 2)):
        got = await access.reserve(subject, "images", units, 3, at)
        assert isinstance(got, Reservation)
        assert await access.commit(got, now=at)
    now = T0 + 200
    denied = await access.reserve(subject, "images", 1, 3, now)
    assert isinstance(denied, Denied)
    assert (denied.used, denied.limit) == (3, 3)
    assert denied.retry_after_seconds == 60 + DAY - 200
    assert (await access.usage(subject, "images", 3, now)).reset_seconds == denied.retry_after_seconds
    retry_at = now + denied.retry_after_seconds
    assert isinstance(await access.reserve(subject, "images", 1, 3, retry_at - 1), Denied)
    assert isinstance(await access.reserve(subject, "images", 1, 3, retry_at), Reservation)
    # Two units need the second bucket to age out too, a minute later.
    wait_two = await access.reserve(subject, "images", 2, 3, retry_at)
    assert isinstance(wait_two, Denied) and wait_two.retry_after_seconds == 60


async def test_partial_grant_gives_what_remains(access: AccessState) -> None:
    first = await access.reserve("key:k2", "text", 30, 50, T0)
    assert isinstance(first, Reservation) and first.remaining == 20
    assert isinstance(await access.reserve("key:k2", "text", 50, 50, T0), Denied)
    rest = await access.reserve("key:k2", "text", 50, 50, T0, allow_partial=True)
    assert isinstance(rest, Reservation)
    assert (rest.units, rest.requested, rest.remaining) == (20, 50, 0)
    empty = await access.reserve("key:k2", "text", 50, 50, T0, allow_partial=True)
    assert isinstance(empty, Denied) and empty.used == 50


async def test_commit_of_fewer_units_returns_the_rest(access: AccessState) -> None:
    got = await access.reserve("key:k3", "text", 25, 100, T0)
    assert isinstance(got, Reservation)
    assert await access.commit(got, units=7, now=T0)
    assert not await access.commit(got, now=T0), "a second commit must not count twice"
    assert (await access.usage("key:k3", "text", 100, T0)).remaining == 93


async def test_pools_are_independent(access: AccessState) -> None:
    got = await access.reserve("ip:192.0.2.5", "text", 500, 500, T0)
    assert isinstance(got, Reservation)
    assert await access.commit(got, now=T0)
    assert isinstance(await access.reserve("ip:192.0.2.5", "text", 1, 500, T0), Denied)
    assert isinstance(await access.reserve("ip:192.0.2.5", "images", 500, 500, T0), Reservation)
    assert isinstance(await access.reserve("ip:192.0.2.6", "text", 1, 500, T0), Reservation)


async def test_uncapped_pool_is_never_refused_but_metered(access: AccessState) -> None:
    for _ in range(3):
        got = await access.reserve("key:paid", "images", 10_000, None, T0)
        assert isinstance(got, Reservation) and got.remaining is None
        assert await access.commit(got, now=T0)
    state = await access.usage("key:paid", "images", None, T0)
    assert (state.used, state.limit, state.remaining) == (30_000, None, None)
    assert await access.daily_usage("key:paid", 1, T0) == [
        {"date": "2027-01-15", "pool": "images", "requests": 3, "units": 30_000}
    ]


async def test_units_below_one_are_refused(access: AccessState) -> None:
    with pytest.raises(ValueError, match="units"):
        await access.reserve("ip:192.0.2.7", "images", 0, 10)


async def test_pending_reservations_give_one_retry_after_on_both_backends(redis_server: str, tmp_path: Path) -> None:
    """A pending reservation counts in the minute it was made (where its commit will count it): SQLite and Redis
    refuse the next caller with the same Retry-After, equal to what ``usage`` reports as the reset."""
    backends: list[AccessState] = [
        SqliteAccess(tmp_path / "access.sqlite3"),
        RedisAccess(redis_server, prefix=f"test:pending-retry:{T0}:{id(tmp_path)}:"),
    ]
    answers = []
    try:
        for access in backends:
            committed = await access.reserve("key:pending", "images", 1, 3, T0 + 10)
            assert isinstance(committed, Reservation) and await access.commit(committed, now=T0 + 10)
            held = await access.reserve("key:pending", "images", 2, 3, T0 + 70)  # made, never settled
            assert isinstance(held, Reservation)
            now = T0 + 200
            denied = await access.reserve("key:pending", "images", 3, 3, now)
            assert isinstance(denied, Denied)
            state = await access.usage("key:pending", "images", 3, now, need=3)
            answers.append((denied.used, denied.retry_after_seconds, state.reset_seconds))
    finally:
        for access in backends:
            await access.close()
    # All three units free when the pending one's minute (T0 + 60 .. T0 + 120) leaves the window.
    assert answers[0] == answers[1] == (3, 120 + DAY - 200, 120 + DAY - 200)
