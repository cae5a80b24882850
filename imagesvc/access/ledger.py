"""The reservations of one delivery, settled by what its client acknowledged.

A door that sends metered bytes over one connection keeps its meters here. A meter is *held* from its reservation
until the last byte of what it pays for has been handed to the connection; it is then *handed* at that byte's
stream position, and committed once the client acknowledged the position (``acknowledge``). Whatever is still held or
handed but unacknowledged when the delivery ends is refunded (``close``). While the delivery runs, ``renew`` keeps
every reservation from lapsing, and ``leases`` (reservations that count something at once, such as an archive's
concurrency slot) are renewed with them and always refunded at the end. Stream positions come from the door (see
``imagesvc.web.wire``); the ledger only compares them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque

from imagesvc.access import AccessState, Reservation
from imagesvc.access.meter import Meter
from imagesvc.errors import ImagesvcError

__all__ = ["Ledger"]

log = logging.getLogger(__name__)


class Ledger:
    """Meters of one delivery: held, handed at a stream position, then committed or refunded exactly once."""

    def __init__(self) -> None:
        self._held: list[Meter] = []
        self._handed: deque[tuple[int, Meter]] = deque()
        self._leases: list[tuple[AccessState, Reservation]] = []
        self._lock = asyncio.Lock()
        self.acknowledged = 0  # meters committed so far
        self.failure: ImagesvcError | None = None  # a commit the access store refused (the bytes were out)

    def hold(self, meter: Meter) -> None:
        """Take charge of ``meter``'s reservations until they are handed over or the delivery ends."""
        if meter not in self._held:
            self._held.append(meter)

    def holds(self, meter: Meter) -> bool:
        return meter in self._held

    def lease(self, access: AccessState, reservation: Reservation) -> None:
        """Renew ``reservation`` while the delivery runs and refund it when it ends."""
        self._leases.append((access, reservation))

    def hand(self, meter: Meter, position: int) -> None:
        """``meter``'s bytes end at stream ``position``: commit it once the client acknowledged that far."""
        if meter in self._held:
            self._held.remove(meter)
        self._handed.append((position, meter))

    @property
    def last_position(self) -> int | None:
        """The position the client must acknowledge for everything handed to be committed (None: nothing waits)."""
        return self._handed[-1][0] if self._handed else None

    async def acknowledge(self, acked: int) -> None:
        """Commit every meter handed at a position up to ``acked``."""
        async with self._lock:
            while self._handed and self._handed[0][0] <= acked:
                _, meter = self._handed.popleft()
                try:
                    await meter.settle(True)
                except ImagesvcError as exc:  # delivered but not counted: the door stops before the next unit
                    log.warning("a delivered unit could not be committed: %s", exc)
                    self.failure = self.failure or exc
                self.acknowledged += 1

    async def release(self, meter: Meter) -> None:
        """Refund a held ``meter`` whose bytes will not be sent; with the store down it lapses by itself."""
        if meter in self._held:
            self._held.remove(meter)
        with contextlib.suppress(ImagesvcError):
            await meter.settle(False)

    async def renew(self) -> None:
        """Keep every pending reservation and lease alive for another reservation lifetime."""
        meters = [*self._held, *(meter for _, meter in self._handed)]
        try:
            for meter in meters:
                await meter.extend()
            for access, reservation in self._leases:
                await access.extend(reservation)
        except ImagesvcError as exc:  # the store is down: try again next time; the reservations lapse meanwhile
            log.warning("reservations of a delivery in progress could not be renewed: %s", exc)

    async def close(self, acked: int | None) -> None:
        """End the delivery: commit what ``acked`` covers (None: nothing more), refund the rest and the leases."""
        if acked is not None:
            await self.acknowledge(acked)
        async with self._lock:
            rest = [*self._held, *(meter for _, meter in self._handed)]
            leases = self._leases
            self._held, self._handed, self._leases = [], deque(), []
        for meter in rest:
            with contextlib.suppress(ImagesvcError):
                await meter.settle(False)
        for access, reservation in leases:
            with contextlib.suppress(ImagesvcError):
                await access.refund(reservation)
