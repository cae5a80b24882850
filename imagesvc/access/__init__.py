"""Access state: the protocol for budgets, request limits and the usage meter, its data types, and the factory.

Budgets are rolling 24-hour windows, one per pool (``text``, ``images``), counted in one-minute buckets. Usage made in
minute ``m`` (``floor(t / 60)``) counts until ``(m + 1) * 60 + 86400``: between 24 h and 24 h + 60 s, never less, so
no 24-hour window ever holds more than the limit, and storage per subject and pool is bounded by 1,440 buckets
whatever the traffic. A reservation is pending until committed or refunded; a pending one that neither happens to
lapses after ``PENDING_TTL`` seconds (``IMAGESVC_RESERVATION_TTL``) unless it is extended, so a crashed process
cannot hold budget for ever while a delivery that is still being written keeps its reservations for as long as it
runs (``extend``).

Request limits are a sliding-window log: at most ``limit`` hits in any ``window_seconds``; a hit ages out exactly
``window_seconds`` after it was made.

Units are integers. The service counts thousandths of an image or page (``MILLI`` per unit: the ``Meter`` passes
units and limits scaled by it), so fractional prices are kept exactly; ``public_state`` and ``public_denied`` turn
exact figures into the whole units callers read.

Backends: ``sqlite`` (one file, shared by every process on one machine) and ``redis`` (shared by every node).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, TypedDict, runtime_checkable

from imagesvc.errors import Unavailable

if TYPE_CHECKING:
    from imagesvc.settings import Settings

__all__ = [
    "BACKENDS",
    "BUCKET_SECONDS",
    "BUDGET_WINDOW",
    "METER_DAYS",
    "MILLI",
    "PENDING_TTL",
    "POOLS",
    "AccessState",
    "AccessUnavailable",
    "Allowed",
    "DayUsage",
    "Denied",
    "Pool",
    "PoolState",
    "Reservation",
    "make_access",
    "public_denied",
    "public_state",
    "refusal",
    "whole_units",
]

BACKENDS = ("sqlite", "redis")
Pool = Literal["text", "images"]
POOLS: tuple[Pool, ...] = ("text", "images")
BUDGET_WINDOW = 86_400  # seconds: budgets are rolling 24-hour windows
BUCKET_SECONDS = 60  # budget precision: usage is summed per minute
PENDING_TTL = 300.0  # seconds a reservation holds budget before it lapses
METER_DAYS = 90  # days of daily usage the meter answers for
MILLI = 1000  # stored units per image or page: prices are exact to a thousandth


class AccessUnavailable(Unavailable):
    """The access-state store cannot be reached or fails. Callers must then deliver nothing and answer 503."""

    dependency = "access store (budgets and rate limits)"


@dataclass(frozen=True)
class Reservation:
    """Budget held for one delivery: ``units`` granted (may be fewer than ``requested`` with ``allow_partial``).

    ``remaining`` is what the pool has left once this reservation is counted (None when uncapped).
    """

    id: str
    subject: str
    pool: str
    units: int
    requested: int
    limit: int | None
    remaining: int | None
    created: float
    expires: float


@dataclass(frozen=True)
class Denied:
    """Refused: ``used`` (committed plus pending) of ``limit``; a retry may succeed after ``retry_after_seconds``."""

    used: int
    limit: int
    retry_after_seconds: int


@dataclass(frozen=True)
class Allowed:
    """A request hit was counted: ``remaining`` hits left in the window; ``reset`` seconds until the oldest ages out."""

    remaining: int | None
    reset: int


@dataclass(frozen=True)
class PoolState:
    """One pool of one subject now. ``reset_seconds``: until the units asked about free up (0 while they are free)."""

    used: int
    limit: int | None
    remaining: int | None
    reset_seconds: int


class DayUsage(TypedDict):
    """One row of the usage meter: committed deliveries of one pool on one UTC day (``YYYY-MM-DD``)."""

    date: str
    pool: str
    requests: int
    units: int


@runtime_checkable
class AccessState(Protocol):
    """The access-state contract. Every method may raise ``AccessUnavailable``; a caller that gets it must deliver
    nothing (budgets cannot be enforced) and report ``unavailable``.

    ``now`` (seconds since the epoch) defaults to the local clock; it is a parameter so tests can travel in time.
    """

    name: str

    async def reserve(
        self,
        subject: str,
        pool: str,
        units: int,
        limit: int | None,
        now: float | None = None,
        *,
        allow_partial: bool = False,
    ) -> Reservation | Denied:
        """Atomically check ``used(24 h) + pending + units <= limit`` and hold the units as a pending reservation.

        With ``allow_partial`` grant what remains (at least one unit) instead of refusing. ``limit=None`` is
        uncapped: always granted, still metered. Under any concurrency, across processes and nodes, granted units
        never exceed the limit. Raises ``ValueError`` when ``units < 1``.
        """
        ...

    async def commit(self, reservation: Reservation, units: int | None = None, now: float | None = None) -> bool:
        """Count the reservation (or only ``units`` of it, the rest returns) as delivered and meter it.

        Returns False, counting nothing, if it was already settled or had lapsed (``PENDING_TTL``).
        """
        ...

    async def extend(self, reservation: Reservation, now: float | None = None) -> bool:
        """Keep a pending reservation for another ``pending_ttl`` seconds from ``now`` (a delivery still being
        written). False, changing nothing, if it was settled already or had lapsed."""
        ...

    async def refund(self, reservation: Reservation, now: float | None = None) -> bool:
        """Release a reservation when nothing was delivered (error, 304, client gone). False if already settled."""
        ...

    async def usage(
        self, subject: str, pool: str, limit: int | None, now: float | None = None, *, need: int = 1
    ) -> PoolState:
        """The pool's state now: committed plus pending units in the rolling window; ``reset_seconds`` is the wait
        until ``need`` units are free (0 when they are)."""
        ...

    async def hit(
        self, subject: str, limit: int | None, window_seconds: int, now: float | None = None
    ) -> Allowed | Denied:
        """Count one request against ``limit`` per ``window_seconds`` (sliding log), atomically; refused hits are
        not counted. ``limit=None`` is unlimited (nothing stored)."""
        ...

    async def record(self, subject: str, pool: str, units: int = 0, now: float | None = None) -> None:
        """Meter one request outside any budget (exempt callers, requests that deliver no units)."""
        ...

    async def daily_usage(self, subject: str, days: int = METER_DAYS, now: float | None = None) -> list[DayUsage]:
        """Committed requests and units per UTC day and pool, the last ``days`` (1 to 90) days, oldest first."""
        ...

    async def ping(self) -> None:
        """Return once the store answers; raise ``AccessUnavailable`` when it does not (checked before an uncapped
        delivery, which reserves nothing, so that nothing metered goes out while the meter cannot be written)."""
        ...

    async def close(self) -> None:
        """Release connections and threads; idempotent."""
        ...


def make_access(settings: Settings) -> AccessState:
    """The backend named by ``settings.access_backend``: ``sqlite`` (``data_dir/access.sqlite3``) or ``redis``."""
    if settings.access_backend == "sqlite":
        from imagesvc.access.sqlite import SqliteAccess

        return SqliteAccess(Path(settings.data_dir) / "access.sqlite3", pending_ttl=settings.reservation_ttl)
    if settings.access_backend == "redis":
        from imagesvc.access.redis import RedisAccess

        return RedisAccess(settings.redis_url, pending_ttl=settings.reservation_ttl, deadline=settings.catalog_deadline)
    raise ValueError(f"unknown access backend {settings.access_backend!r}; valid: {', '.join(BACKENDS)}")


# Helpers shared by the backends (not part of the public surface).


def bucket_of(t: float) -> int:
    """The minute bucket usage made at ``t`` is counted in."""
    return math.floor(t / BUCKET_SECONDS)


def oldest_live_bucket(now: float) -> int:
    """Buckets below this have aged out at ``now`` (bucket ``m`` counts while ``now < (m + 1) * 60 + 86400``)."""
    return math.floor((now - BUDGET_WINDOW) / BUCKET_SECONDS)


def bucket_release(bucket: int) -> float:
    """The instant a bucket's units stop counting."""
    return (bucket + 1) * BUCKET_SECONDS + BUDGET_WINDOW


def wait_until_free(releases: Iterable[tuple[float, int]], need: int, now: float) -> int:
    """Whole seconds (>= 1) until ``need`` units have been released, from ``(release instant, units)`` pairs.

    Pending units are passed as if committed (most will be), so the answer is never too early. When the counted
    units cannot free ``need`` (a request larger than the limit), the whole window is returned.
    """
    freed = 0
    for at, units in sorted(releases):
        freed += units
        if freed >= need:
            return max(1, math.ceil(at - now))
    return BUDGET_WINDOW


def check_units(units: int) -> None:
    if units < 1:
        raise ValueError(f"units must be at least 1, got {units}")


def utc_day(t: float) -> int:
    """Days since the epoch (UTC) of instant ``t``: the meter's day key."""
    return math.floor(t / 86_400)


def pool_state(releases: list[tuple[float, int]], limit: int | None, now: float, need: int = 1) -> PoolState:
    """A pool's state from its live ``(release instant, units)`` pairs; ``reset_seconds`` until ``need`` are free."""
    used = sum(u for _, u in releases)
    if limit is None:
        return PoolState(used, None, None, 0)
    remaining = max(0, limit - used)
    reset = 0 if remaining >= need else wait_until_free(releases, used - limit + need, now)
    return PoolState(used, limit, remaining, reset)


def refusal(releases: list[tuple[float, int]], limit: int, wanted: int, now: float) -> Denied:
    """The refusal of a request for ``wanted`` units, from the pool's live ``(release instant, units)`` pairs (pending
    reservations dated when they were made): every backend answers the same state with the same Retry-After."""
    state = pool_state(releases, limit, now, wanted)
    return Denied(state.used, limit, state.reset_seconds)


def day_name(day: int) -> str:
    """``YYYY-MM-DD`` of a meter day number."""
    return (dt.date(1970, 1, 1) + dt.timedelta(days=day)).isoformat()


def whole_units(milli: int) -> int:
    """Whole units a caller is shown for ``milli`` thousandths used or delivered: rounded up (never under-stated)."""
    return -(-milli // MILLI)


def public_state(exact: PoolState) -> PoolState:
    """An exact (thousandths) pool state in whole units: ``remaining`` is the floor of what is left, ``used`` the
    limit minus that; ``reset_seconds`` is kept. Uncapped pools show their use rounded up."""
    if exact.limit is None or exact.remaining is None:
        return PoolState(whole_units(exact.used), None, None, 0)
    limit = exact.limit // MILLI
    remaining = exact.remaining // MILLI
    return PoolState(limit - remaining, limit, remaining, exact.reset_seconds)


def public_denied(exact: Denied) -> Denied:
    """A refusal in thousandths as whole units (``used`` rounded up, as in ``public_state``)."""
    limit = exact.limit // MILLI
    return Denied(min(limit, whole_units(exact.used)), limit, exact.retry_after_seconds)
