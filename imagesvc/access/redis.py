"""Access state in Redis: exact counts shared by every app instance, one Lua script per check-and-write.

Keys (all with TTLs, so idle subjects leave nothing behind; the ``{subject}`` hash tag keeps one subject's keys in one
cluster slot so a script may touch them together):
``u:<pool>`` hash minute -> committed units; ``p:<pool>`` hash reservation id -> "units created expires" plus a
running ``_sum``; ``q:<pool>`` sorted set of reservation ids by expiry;
``r:<window>`` sorted set of request hits scored by time; ``m:<day>`` hash ``<pool>:r`` / ``<pool>:u`` -> meter.
Times come from the calling instance's clock (pass ``now``), so instances must keep their clocks in sync (NTP).
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from imagesvc.access import (
    BUCKET_SECONDS,
    BUDGET_WINDOW,
    METER_DAYS,
    PENDING_TTL,
    AccessUnavailable,
    Allowed,
    DayUsage,
    Denied,
    PoolState,
    Reservation,
    bucket_of,
    bucket_release,
    check_units,
    day_name,
    oldest_live_bucket,
    pool_state,
    refusal,
    utc_day,
)
from imagesvc.access import redis_scripts as scripts
from imagesvc.access.group import GroupCommit, MeterRecord

__all__ = ["RedisAccess"]

_USAGE_TTL = BUDGET_WINDOW + 2 * BUCKET_SECONDS
_METER_TTL = (METER_DAYS + 2) * 86_400
PROBE_SECONDS = 0.5  # between two pings of a Redis known to be hung


class RedisAccess:
    """``AccessState`` in the Redis at ``url``; every instance pointed at the same Redis shares exact counts."""

    name = "redis"

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "imagesvc:access:",
        pending_ttl: float = PENDING_TTL,
        max_connections: int = 16,
        deadline: float = 2.0,
    ) -> None:
        self.prefix = prefix
        # A hung Redis (stopped, not down) answers nothing and refuses nothing. A call that gets no answer within
        # this deadline fails as an outage and marks Redis hung: every call then fails at once, those queued for a
        # connection included, while one probe pings it every PROBE_SECONDS; the first answer ends it. So a request
        # waits at most the deadline however many are queued, rather than a socket timeout and a retry each in turn.
        # (The socket timeout is the deadline too: redis-py does not always let the outer one cancel a read.)
        self.deadline = deadline
        self._probe: asyncio.Task[None] | None = None  # running while Redis is known to be hung
        self.pending_ttl = pending_ttl
        parts = urlsplit(url)
        self._where = f"{parts.hostname or 'localhost'}:{parts.port or 6379}"  # never the password
        # A burst queues on a FIFO semaphore instead of opening thousands of sockets. (redis-py's blocking pool
        # does the same job unfairly: some callers waited seconds while later ones went first.)
        self._gate = asyncio.Semaphore(max_connections)
        self._meter = GroupCommit(self._record_many)
        pool = aioredis.ConnectionPool.from_url(
            url,
            max_connections=max_connections,
            socket_connect_timeout=2,
            socket_timeout=deadline,
            retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),  # dropped, not silent
            decode_responses=True,
        )
        self._redis = aioredis.Redis(connection_pool=pool)
        self._reserve = self._redis.register_script(scripts.RESERVE)
        self._commit = self._redis.register_script(scripts.COMMIT)
        self._refund = self._redis.register_script(scripts.REFUND)
        self._extend = self._redis.register_script(scripts.EXTEND)
        self._hit = self._redis.register_script(scripts.HIT)
        self._write_meter = self._redis.register_script(scripts.METER)

    @asynccontextmanager
    async def _translate(self) -> AsyncIterator[None]:
        try:
            async with self._gate:
                if self._probe is not None:
                    raise AccessUnavailable(
                        f"Redis at {self._where} holds budgets and rate limits and has not answered for "
                        f"{self.deadline:g} s or more; nothing is delivered until it does."
                    )
                try:
                    async with asyncio.timeout(self.deadline):
                        yield
                except (TimeoutError, RedisTimeoutError) as exc:
                    self._hung()
                    raise AccessUnavailable(
                        f"Redis at {self._where} holds budgets and rate limits and did not answer within "
                        f"{self.deadline:g} s; nothing is delivered until it does."
                    ) from exc
        except (RedisError, OSError) as exc:
            raise AccessUnavailable(
                f"Redis at {self._where} holds budgets and rate limits and cannot be used ({exc}); nothing is "
                "delivered until it is back."
            ) from exc

    def _hung(self) -> None:
        if self._probe is None:
            self._probe = asyncio.create_task(self._until_answered())

    async def _until_answered(self) -> None:
        """Ping every ``PROBE_SECONDS`` (each under the deadline) until Redis answers; then calls go through again."""
        while True:
            await asyncio.sleep(PROBE_SECONDS)
            try:
                async with asyncio.timeout(self.deadline):
                    await self._redis.ping()
            except (TimeoutError, RedisError, OSError):
                continue
            self._probe = None
            return

    def _key(self, subject: str, kind: str) -> str:
        return f"{self.prefix}{{{subject}}}:{kind}"

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
        check_units(units)
        now = time.time() if now is None else now
        rid, expires = uuid.uuid4().hex, now + self.pending_ttl
        keys = [self._key(subject, f"u:{pool}"), self._key(subject, f"p:{pool}"), self._key(subject, f"q:{pool}")]
        args: list[Any] = [
            repr(now),
            units,
            -1 if limit is None else limit,
            int(allow_partial),
            rid,
            repr(expires),
            math.ceil(self.pending_ttl * 1000) + 60_000,
        ]
        async with self._translate():
            ok, n, extra = await self._reserve(keys=keys, args=args)
        if ok:
            remaining = None if extra < 0 else int(extra)
            return Reservation(rid, subject, pool, int(n), units, limit, remaining, now, expires)
        assert limit is not None  # only a capped pool refuses
        return refusal(_releases(extra), limit, 1 if allow_partial else units, now)

    async def commit(self, reservation: Reservation, units: int | None = None, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        r = reservation
        keys = [
            self._key(r.subject, f"p:{r.pool}"),
            self._key(r.subject, f"q:{r.pool}"),
            self._key(r.subject, f"u:{r.pool}"),
            self._key(r.subject, f"m:{utc_day(r.created)}"),
        ]
        args = [r.id, repr(now), -1 if units is None else max(0, units), r.pool, _USAGE_TTL, _METER_TTL]
        async with self._translate():
            counted = await self._commit(keys=keys, args=args)
        return int(counted) >= 0

    async def extend(self, reservation: Reservation, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        keys = [self._key(reservation.subject, f"{kind}:{reservation.pool}") for kind in "pq"]
        args = [reservation.id, repr(now), repr(now + self.pending_ttl), math.ceil(self.pending_ttl * 1000) + 60_000]
        async with self._translate():
            kept = await self._extend(keys=keys, args=args)
        return int(kept) == 1

    async def refund(self, reservation: Reservation, now: float | None = None) -> bool:
        async with self._translate():
            keys = [self._key(reservation.subject, f"{kind}:{reservation.pool}") for kind in "pq"]
            released = await self._refund(keys=keys, args=[reservation.id])
        return int(released) >= 0

    async def usage(
        self, subject: str, pool: str, limit: int | None, now: float | None = None, *, need: int = 1
    ) -> PoolState:
        now = time.time() if now is None else now
        async with self._translate(), self._redis.pipeline(transaction=True) as pipe:
            pipe.hgetall(self._key(subject, f"u:{pool}"))
            pipe.hgetall(self._key(subject, f"p:{pool}"))
            committed, pending = await pipe.execute()
        oldest = oldest_live_bucket(now)
        releases = [(bucket_release(int(m)), int(u)) for m, u in committed.items() if int(m) >= oldest]
        pending.pop("_sum", None)
        for value in pending.values():
            n, created, expires = value.split()
            if float(expires) > now:
                releases.append((bucket_release(bucket_of(float(created))), int(n)))
        return pool_state(releases, limit, now, need)

    async def hit(
        self, subject: str, limit: int | None, window_seconds: int, now: float | None = None
    ) -> Allowed | Denied:
        if limit is None:
            return Allowed(None, 0)
        now = time.time() if now is None else now
        key = self._key(subject, f"r:{window_seconds}")
        async with self._translate():
            args = [repr(now), limit, window_seconds, uuid.uuid4().hex, repr(now - window_seconds)]
            ok, count, ts = await self._hit(keys=[key], args=args)
        # min(): a hit stamped by a faster clock (another instance, or a call that queued) never waits > a window.
        wait = max(1, min(window_seconds, math.ceil(float(ts) + window_seconds - now)))
        if ok:
            return Allowed(limit - int(count) - 1, wait)
        return Denied(int(count), limit, wait)

    async def record(self, subject: str, pool: str, units: int = 0, now: float | None = None) -> None:
        await self._meter.submit(MeterRecord(subject, pool, units, time.time() if now is None else now))

    async def _record_many(self, records: list[MeterRecord]) -> None:
        # One script call per subject, so each touches only keys of one hash slot (as on a Redis Cluster), all of
        # them sent in one pipeline: one round trip for the batch.
        by_subject: dict[str, list[MeterRecord]] = {}
        for record in records:
            by_subject.setdefault(record.subject, []).append(record)
        async with self._translate(), self._redis.pipeline(transaction=False) as pipe:
            for subject, mine in by_subject.items():
                keys = [self._key(subject, f"m:{utc_day(r.now)}") for r in mine]
                args: list[str | int] = [value for r in mine for value in (r.pool, r.units)]
                await self._write_meter(keys=keys, args=[*args, _METER_TTL], client=pipe)
            await pipe.execute()

    async def daily_usage(self, subject: str, days: int = METER_DAYS, now: float | None = None) -> list[DayUsage]:
        if not 1 <= days <= METER_DAYS:
            raise ValueError(f"days must be 1 to {METER_DAYS}, got {days}")
        last = utc_day(time.time() if now is None else now)
        day_numbers = range(last - days + 1, last + 1)
        async with self._translate(), self._redis.pipeline(transaction=False) as pipe:
            for day in day_numbers:
                pipe.hgetall(self._key(subject, f"m:{day}"))
            meters = await pipe.execute()
        rows: list[DayUsage] = []
        for day, meter in zip(day_numbers, meters, strict=True):
            pools = sorted({field.rsplit(":", 1)[0] for field in meter})
            for pool in pools:
                rows.append(
                    DayUsage(
                        date=day_name(day),
                        pool=pool,
                        requests=int(meter.get(f"{pool}:r", 0)),
                        units=int(meter.get(f"{pool}:u", 0)),
                    )
                )
        return rows

    async def ping(self) -> None:
        async with self._translate():
            await self._redis.ping()

    async def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
        await self._meter.flush()
        await self._redis.aclose()
        await self._redis.connection_pool.disconnect()


def _releases(flat: list[str]) -> list[tuple[float, int]]:
    """``(instant it stops counting, units)`` from the script's flat list of (time in bucket, units)."""
    return [(bucket_release(bucket_of(float(flat[i]))), int(flat[i + 1])) for i in range(0, len(flat), 2)]
