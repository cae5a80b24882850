"""Per-request metering: reserve budget before delivering, then commit on delivery or refund when nothing went out.

One ``Meter`` lives for one request (REST) or one tool call (MCP). Tools reserve what they are about to deliver; the
door that sends the bytes settles the meter once it knows whether they were delivered.

Units are exact: the access backends count integer thousandths of a unit (``MILLI`` per image or page), so a
deep-zoom tile can cost its exact fraction of an image. The figures a caller reads (RateLimit headers, 429 bodies,
``/rate_limit``) are whole units, rounded against the caller: ``remaining`` is the floor of the exact remainder and
``used`` is the limit minus that, so a pool with less than one whole unit left refuses a whole-unit request.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from imagesvc.access import MILLI, AccessState, Denied, PoolState, Reservation, public_denied, public_state
from imagesvc.access.headers import rate_limited
from imagesvc.access.identity import Caller

__all__ = ["Meter"]


@dataclass
class Meter:
    """Budget reservations of one request, and the pool states (in whole units) its response headers report."""

    access: AccessState
    caller: Caller
    reservations: list[Reservation] = field(default_factory=list)
    states: dict[str, PoolState] = field(default_factory=dict)
    uncapped: dict[str, int] = field(default_factory=dict)  # milli-units of uncapped pools, metered once delivered
    delivers: bool = True  # False for a HEAD: reservations check the pool and count nothing
    alive: bool = False  # the access store already answered during this request (then uncapped pools need no ping)

    async def reserve(self, pool: str, units: int, *, allow_partial: bool = False) -> int:
        """Hold ``units`` whole units of ``pool`` (fewer with ``allow_partial``); returns the whole units granted.

        Raises ``RateLimited`` (429 with Retry-After) when the pool is exhausted, ``AccessUnavailable`` when the
        access store is down; in both cases nothing may be delivered.
        """
        if units < 1:
            raise ValueError("units must be at least 1")
        granted = await self.reserve_milli(pool, units * MILLI, allow_partial=allow_partial)
        if granted % MILLI and self.delivers and self.reservations:
            # A partial grant ended inside a unit, but whole pages are delivered: hold exactly the whole units
            # (at least one, which is refused, with its true Retry-After, when less than one is left).
            await self.access.refund(self.reservations.pop())
            return await self.reserve_milli(pool, max(1, granted // MILLI) * MILLI) // MILLI
        if granted < MILLI:
            raise self._refusal(pool, granted, MILLI)  # a HEAD's check: less than one whole unit is left
        return granted // MILLI

    async def reserve_milli(self, pool: str, milli: int, *, allow_partial: bool = False) -> int:
        """Hold ``milli`` thousandths of a unit of ``pool``; returns the thousandths granted (see ``reserve``)."""
        if milli < 1:
            raise ValueError("milli-units must be at least 1")
        allowance = self.caller.allowance
        limit = allowance.budget(pool)
        if not self.delivers:
            return await self._check(pool, milli, allow_partial)
        if limit is None:
            # Nothing to hold back for an uncapped pool (paid tiers, exempt callers): no reservation round trip, only
            # the meter once delivered. The store must still answer first: with it down nothing metered goes out.
            await self._ensure_alive()
            self.uncapped[pool] = self.uncapped.get(pool, 0) + milli
            return milli
        result = await self.access.reserve(self.caller.subject, pool, milli, limit * MILLI, allow_partial=allow_partial)
        if not isinstance(result, Reservation):
            raise rate_limited(allowance, pool, public_denied(result))
        self.reservations.append(result)
        if result.remaining is not None:
            exact = PoolState(limit * MILLI - result.remaining, limit * MILLI, result.remaining, 0)
            self.states[pool] = public_state(exact)
        return result.units

    async def _ensure_alive(self) -> None:
        if not self.alive:
            await self.access.ping()
            self.alive = True

    async def state(self, pool: str) -> PoolState:
        """The pool's state in whole units without counting anything (for headers and the quota endpoint)."""
        limit = self.caller.allowance.budget(pool)
        exact = await self.access.usage(self.caller.subject, pool, self._exact(limit), need=MILLI)
        self.alive = True
        state = public_state(exact)
        self.states.setdefault(pool, state)
        return state

    @staticmethod
    def _exact(limit: int | None) -> int | None:
        return None if limit is None else limit * MILLI

    async def _check(self, pool: str, milli: int, allow_partial: bool) -> int:
        """A reservation that delivers nothing (HEAD): count nothing, but raise the ``RateLimited`` a real one would
        raise, so that HEAD answers as GET would. Returns the thousandths a real one would grant."""
        limit = self.caller.allowance.budget(pool)
        exact = await self.access.usage(self.caller.subject, pool, self._exact(limit), need=milli)
        self.alive = True
        self.states.setdefault(pool, public_state(exact))
        if exact.limit is None or exact.remaining is None:
            return milli
        granted = min(milli, exact.remaining)
        if granted < (1 if allow_partial else milli):
            raise self._refusal(pool, exact.remaining, milli, exact.reset_seconds)
        return granted

    def _refusal(self, pool: str, remaining: int, need: int, retry: int = 0) -> Exception:
        """The 429 for a pool that holds ``remaining`` of the ``need`` thousandths asked for."""
        limit = self.caller.allowance.budget(pool) or 0
        exact = Denied(limit * MILLI - remaining, limit * MILLI, max(1, retry))
        return rate_limited(self.caller.allowance, pool, public_denied(exact))

    def adopt(self, other: Meter) -> None:
        """Take over another meter's unsettled holdings (one tool call's meter joining its request's)."""
        self.reservations.extend(other.reservations)
        self.states.update(other.states)
        for pool, milli in other.uncapped.items():
            self.uncapped[pool] = self.uncapped.get(pool, 0) + milli
        other.reservations, other.uncapped = [], {}

    def holds(self) -> bool:
        """Whether anything waits to be settled (a reservation, or units of an uncapped pool)."""
        return bool(self.reservations or self.uncapped)

    async def extend(self) -> None:
        """Keep every pending reservation for another reservation lifetime: the delivery is still being written.
        One that lapsed anyway (the store was unreachable for a whole lifetime) is held again, from the pool as it is
        now; a refusal then leaves it lapsed and its commit counts nothing."""
        for index, held in enumerate(self.reservations):
            if not await self.access.extend(held):
                again = await self.access.reserve(held.subject, held.pool, held.units, held.limit)
                if isinstance(again, Reservation):
                    self.reservations[index] = again

    async def settle(self, delivered: bool) -> None:
        """Commit every reservation when the response went out, refund them all when it did not."""
        pending, self.reservations = self.reservations, []
        uncapped, self.uncapped = self.uncapped, {}
        if delivered:
            for pool, milli in uncapped.items():
                await self.access.record(self.caller.subject, pool, milli)
        for reservation in pending:
            if delivered:
                await self.access.commit(reservation)
            else:
                await self.access.refund(reservation)
