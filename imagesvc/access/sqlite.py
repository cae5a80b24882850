"""Access state in one SQLite file: exact across every process on one machine that opens the same file.

Each check-and-write is one ``BEGIN IMMEDIATE`` transaction, which takes the file's write lock before reading, so
two processes (or two objects in one) can never both see the same free units. The file is in WAL mode so readers
never wait. All sqlite calls run in one dedicated thread per object, so the event loop never blocks on the file.
"""

from __future__ import annotations

import asyncio
import math
import sqlite3
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from imagesvc.access import (
    BUCKET_SECONDS,
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
from imagesvc.access.group import GroupCommit, MeterRecord

__all__ = ["SqliteAccess"]

T = TypeVar("T")
_SWEEP_EVERY = 600.0  # seconds between sweeps of rows left by subjects that never came back

_SCHEMA = """
CREATE TABLE IF NOT EXISTS usage (subject TEXT, pool TEXT, minute INTEGER, units INTEGER NOT NULL,
    PRIMARY KEY (subject, pool, minute)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS usage_minute ON usage (minute);
CREATE TABLE IF NOT EXISTS pending (id TEXT PRIMARY KEY, subject TEXT NOT NULL, pool TEXT NOT NULL,
    units INTEGER NOT NULL, created REAL NOT NULL, expires REAL NOT NULL);
CREATE INDEX IF NOT EXISTS pending_subject ON pending (subject, pool);
CREATE INDEX IF NOT EXISTS pending_expires ON pending (expires);
CREATE TABLE IF NOT EXISTS hits (subject TEXT NOT NULL, win INTEGER NOT NULL, ts REAL NOT NULL,
    expires REAL NOT NULL);
CREATE INDEX IF NOT EXISTS hits_subject ON hits (subject, win, ts);
CREATE INDEX IF NOT EXISTS hits_expires ON hits (expires);
CREATE TABLE IF NOT EXISTS meter (subject TEXT, day INTEGER, pool TEXT, requests INTEGER NOT NULL,
    units INTEGER NOT NULL, PRIMARY KEY (subject, day, pool)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS meter_day ON meter (day);
"""

_METER_UPSERT = (
    "INSERT INTO meter VALUES (?, ?, ?, 1, ?) "
    "ON CONFLICT DO UPDATE SET requests = requests + 1, units = units + excluded.units"
)


class SqliteAccess:
    """``AccessState`` on the SQLite file at ``path`` (created with its folder if missing)."""

    name = "sqlite"

    def __init__(self, path: str | Path, *, pending_ttl: float = PENDING_TTL) -> None:
        self.path = Path(path)
        self.pending_ttl = pending_ttl
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="access-sqlite")
        self._con: sqlite3.Connection | None = None  # touched only by the worker thread
        self._last_sweep = -math.inf
        self._closed = False
        self._meter = GroupCommit(self._record_many)

    async def _run(self, fn: Callable[..., T], *args: Any, write: bool = True) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._thread, self._tx, fn, args, write)
        except sqlite3.Error as exc:
            raise AccessUnavailable(
                f"The access-state file {self.path} cannot be used ({exc}); budgets cannot be checked, so nothing "
                "is delivered until it is fixed."
            ) from exc

    def _tx(self, fn: Callable[..., T], args: tuple[Any, ...], write: bool) -> T:
        con = self._connect()
        con.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            result = fn(con, *args)
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")
        return result

    def _connect(self) -> sqlite3.Connection:
        if self._con is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            con = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
            try:
                _use_wal(con)
            except sqlite3.Error:
                con.close()
                raise
            con.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across crashes of the app, not the OS
            con.executescript(_SCHEMA)
            self._con = con
        return self._con

    def _sweep(self, con: sqlite3.Connection, now: float) -> None:
        if now - self._last_sweep < _SWEEP_EVERY:
            return
        self._last_sweep = now
        con.execute("DELETE FROM pending WHERE expires <= ?", (now,))
        con.execute("DELETE FROM usage WHERE minute < ?", (oldest_live_bucket(now),))
        con.execute("DELETE FROM hits WHERE expires <= ?", (now,))
        con.execute("DELETE FROM meter WHERE day < ?", (utc_day(now) - METER_DAYS - 1,))

    @staticmethod
    def _releases(con: sqlite3.Connection, subject: str, pool: str, now: float) -> list[tuple[float, int]]:
        """(instant it stops counting, units) for every committed bucket and live reservation."""
        rows = con.execute(
            "SELECT minute * ?, units FROM usage WHERE subject = ? AND pool = ? AND minute >= ? "
            "UNION ALL SELECT created, units FROM pending WHERE subject = ? AND pool = ? AND expires > ?",
            (BUCKET_SECONDS, subject, pool, oldest_live_bucket(now), subject, pool, now),
        ).fetchall()
        return [(bucket_release(bucket_of(t)), units) for t, units in rows]

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
        return await self._run(self._reserve, subject, pool, units, limit, now, allow_partial)

    def _reserve(
        self, con: sqlite3.Connection, subject: str, pool: str, units: int, limit: int | None, now: float, partial: bool
    ) -> Reservation | Denied:
        self._sweep(con, now)
        con.execute("DELETE FROM pending WHERE subject = ? AND pool = ? AND expires <= ?", (subject, pool, now))
        granted, remaining = units, None
        if limit is not None:
            releases = self._releases(con, subject, pool, now)
            used = sum(u for _, u in releases)
            free = limit - used
            granted = min(units, free) if partial else (units if units <= free else 0)
            if granted <= 0:
                return refusal(releases, limit, 1 if partial else units, now)
            remaining = free - granted
        rid = uuid.uuid4().hex
        expires = now + self.pending_ttl
        con.execute("INSERT INTO pending VALUES (?, ?, ?, ?, ?, ?)", (rid, subject, pool, granted, now, expires))
        return Reservation(rid, subject, pool, granted, units, limit, remaining, now, expires)

    async def commit(self, reservation: Reservation, units: int | None = None, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        return await self._run(self._commit, reservation, units, now)

    def _commit(self, con: sqlite3.Connection, r: Reservation, units: int | None, now: float) -> bool:
        row = con.execute("DELETE FROM pending WHERE id = ? RETURNING units, expires", (r.id,)).fetchone()
        if row is None or row[1] <= now:
            return False  # settled already, or lapsed: its units may have been granted to someone else
        n = row[0] if units is None else max(0, min(units, row[0]))
        if n:
            con.execute(
                "INSERT INTO usage VALUES (?, ?, ?, ?) ON CONFLICT DO UPDATE SET units = units + excluded.units",
                (r.subject, r.pool, bucket_of(r.created), n),
            )
            # Uncapped subjects are never summed by reserve; trimming here keeps their rows bounded too.
            con.execute(
                "DELETE FROM usage WHERE subject = ? AND pool = ? AND minute < ?",
                (r.subject, r.pool, oldest_live_bucket(now)),
            )
        con.execute(_METER_UPSERT, (r.subject, utc_day(r.created), r.pool, n))
        return True

    async def extend(self, reservation: Reservation, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        return await self._run(self._extend, reservation.id, now)

    def _extend(self, con: sqlite3.Connection, rid: str, now: float) -> bool:
        updated = con.execute(
            "UPDATE pending SET expires = ? WHERE id = ? AND expires > ?", (now + self.pending_ttl, rid, now)
        )
        return updated.rowcount > 0

    async def refund(self, reservation: Reservation, now: float | None = None) -> bool:
        return await self._run(self._refund, reservation.id)

    @staticmethod
    def _refund(con: sqlite3.Connection, rid: str) -> bool:
        return con.execute("DELETE FROM pending WHERE id = ?", (rid,)).rowcount > 0

    async def usage(
        self, subject: str, pool: str, limit: int | None, now: float | None = None, *, need: int = 1
    ) -> PoolState:
        now = time.time() if now is None else now
        releases = await self._run(self._releases, subject, pool, now, write=False)
        return pool_state(releases, limit, now, need)

    async def hit(
        self, subject: str, limit: int | None, window_seconds: int, now: float | None = None
    ) -> Allowed | Denied:
        if limit is None:
            return Allowed(None, 0)
        now = time.time() if now is None else now
        return await self._run(self._hit, subject, limit, window_seconds, now)

    def _hit(self, con: sqlite3.Connection, subject: str, limit: int, window: int, now: float) -> Allowed | Denied:
        self._sweep(con, now)
        key = (subject, window)
        con.execute("DELETE FROM hits WHERE subject = ? AND win = ? AND ts <= ?", (*key, now - window))
        where = "FROM hits WHERE subject = ? AND win = ?"
        count, oldest = con.execute(f"SELECT count(*), min(ts) {where}", key).fetchone()
        if count >= limit:
            # The hit that must age out for one more to fit: the (count - limit + 1)-th oldest.
            (ts,) = con.execute(
                f"SELECT ts {where} ORDER BY ts LIMIT 1 OFFSET ?",
                (*key, count - limit),
            ).fetchone()
            # min(): a hit stamped later than this call's clock (it queued) never makes anyone wait > a window.
            return Denied(count, limit, max(1, min(window, math.ceil(ts + window - now))))
        con.execute("INSERT INTO hits VALUES (?, ?, ?, ?)", (*key, now, now + window))
        first = now if oldest is None else min(oldest, now)
        return Allowed(limit - count - 1, max(1, math.ceil(first + window - now)))

    async def record(self, subject: str, pool: str, units: int = 0, now: float | None = None) -> None:
        await self._meter.submit(MeterRecord(subject, pool, units, time.time() if now is None else now))

    async def _record_many(self, records: list[MeterRecord]) -> None:
        await self._run(self._write_meter, records)

    @staticmethod
    def _write_meter(con: sqlite3.Connection, records: list[MeterRecord]) -> None:
        con.executemany(_METER_UPSERT, [(r.subject, utc_day(r.now), r.pool, r.units) for r in records])

    async def daily_usage(self, subject: str, days: int = METER_DAYS, now: float | None = None) -> list[DayUsage]:
        if not 1 <= days <= METER_DAYS:
            raise ValueError(f"days must be 1 to {METER_DAYS}, got {days}")
        first = utc_day(time.time() if now is None else now) - days + 1
        rows = await self._run(self._meter_rows, subject, first, write=False)
        return [DayUsage(date=day_name(d), pool=p, requests=r, units=u) for d, p, r, u in rows]

    @staticmethod
    def _meter_rows(con: sqlite3.Connection, subject: str, first: int) -> list[tuple[int, str, int, int]]:
        return con.execute(
            "SELECT day, pool, requests, units FROM meter WHERE subject = ? AND day >= ? ORDER BY day, pool",
            (subject, first),
        ).fetchall()

    async def ping(self) -> None:
        await self._run(_nothing, write=False)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._meter.flush()
        await asyncio.get_running_loop().run_in_executor(self._thread, self._close_con)
        self._thread.shutdown(wait=True)

    def _close_con(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None


def _nothing(con: sqlite3.Connection) -> None:
    """A read transaction that reads nothing: opens (or creates) the file and proves it usable."""


def _use_wal(con: sqlite3.Connection, attempts: int = 100) -> None:
    """Put the file in WAL mode. Switching needs the file to itself, and SQLite answers "locked" at once, without
    its busy wait, when another instance opens a new file at the same moment: so try again for up to two seconds."""
    for attempt in range(attempts):
        try:
            con.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == attempts - 1:
                raise
            time.sleep(0.02)
