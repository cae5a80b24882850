"""Group commit for the usage meter: records that arrive while a write is in flight go out together in the next one.

Every delivery to an uncapped caller (paid tiers, exempt callers) is metered once its bytes went out. Under load,
one transaction (SQLite) or one pipeline (Redis) per delivery costs more than the delivery itself; coalescing the
records that queue up meanwhile keeps the meter exact, each caller still waits until its own record is stored, and
an idle service writes each record at once, as before. A write that fails fails every record of its batch (each
caller gets the error, after its delivery, and it is logged); it is not retried, since a write whose reply was lost
may have been stored, and a retry would then count it twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import NamedTuple

__all__ = ["GroupCommit", "MeterRecord"]


class MeterRecord(NamedTuple):
    """One metered request: who, which pool, how many units, and when (Unix seconds)."""

    subject: str
    pool: str
    units: int
    now: float


class GroupCommit:
    """Feeds ``write`` batches of records, one batch at a time, in arrival order."""

    def __init__(self, write: Callable[[list[MeterRecord]], Awaitable[None]]) -> None:
        self._write = write
        self._queue: list[tuple[MeterRecord, asyncio.Future[None]]] = []
        self._inflight: list[tuple[MeterRecord, asyncio.Future[None]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def submit(self, record: MeterRecord) -> None:
        """Store ``record``; returns once the batch holding it is written, raises what the write raised.

        A caller cancelled while waiting does not take its record back: it is written with its batch.
        """
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((record, future))
        if self._writer is None:
            self._writer = asyncio.create_task(self._drain())
            self._writer.add_done_callback(self._writer_done)
        await future

    async def _drain(self) -> None:
        while self._queue:
            self._inflight, self._queue = self._queue, []
            try:
                await self._write([record for record, _ in self._inflight])
            except Exception as exc:
                _settle(self._inflight, exc)
            else:
                _settle(self._inflight, None)
            self._inflight = []
        self._writer = None

    def _writer_done(self, writer: asyncio.Task[None]) -> None:
        if not writer.cancelled():
            return
        # Only a shutdown cancels the writer, and its callers must not wait for ever: they get CancelledError. The
        # batch in flight may still be stored (a SQLite write runs on to the end on its thread); the queued ones are
        # not, nor is a record submitted between the cancellation and this callback.
        for _, future in [*self._inflight, *self._queue]:
            future.cancel()
        self._inflight, self._queue = [], []
        if self._writer is writer:
            self._writer = None

    async def flush(self) -> None:
        """Wait until every record submitted so far is written (before closing the backend)."""
        while self._writer is not None:
            await asyncio.wait([self._writer])


def _settle(batch: list[tuple[MeterRecord, asyncio.Future[None]]], error: Exception | None) -> None:
    for _, future in batch:
        if future.done():  # its caller was cancelled; the record was written (or failed) all the same
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
