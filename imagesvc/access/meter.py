"""Per-request metering: reserve budget before delivering, then commit on delivery or refund when nothing went out.

One ``Meter`` lives for one request (REST) or one tool call (MCP). Tools reserve what they are about to deliver; the
door that sends the bytes settles the meter once it knows whether they were delivered.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from imagesvc.access import AccessState, Denied, PoolState, Reservation
from imagesvc.access.headers import rate_limited
from imagesvc.access.identity import Caller

__all__ = ["Meter"]


@dataclass
class Meter:
    """Budget reservations of one request, and the pool states its response headers report."""

    access: AccessState
    caller: Caller
    reservations: list[Reservation] = field(default_factory=list)
    states: dict[str, PoolState] = field(default_factory=dict)
    uncapped: dict[str, int] = field(default_factory=dict)  # units of uncapped pools, metered once delivered
    delivers: bool = True  # False for a HEAD: reservations check the pool and count nothing

    async def reserve(self, pool: str, units: int, *, allow_partial: bool = False) -> int:
        """Hold ``units`` of ``pool`` (fewer with ``allow_partial``); returns the units granted.

        Raises ``RateLimited`` (429 with Retry-After) when the pool is exhausted, ``AccessUnavailable`` when the
        access store is down; in both cases nothing may be delivered.
        """
        allowance = self.caller.allowance
        limit = allowance.budget(pool)
        if not self.delivers:
            return await self._check(pool, units, allow_partial)
        if limit is None:
            # Nothing to hold back for an uncapped pool (paid tiers, exempt callers): skip the reservation round trip
            # and only meter what is delivered, when the meter settles.
            if units < 1:
                raise ValueError("units must be at least 1")
            self.uncapped[pool] = self.uncapped.get(pool, 0) + units
            return units
        result = await self.access.reserve(self.caller.subject, pool, units, limit, allow_partial=allow_partial)
        if not isinstance(result, Reservation):
            raise rate_limited(allowance, pool, result)
        self.reservations.append(result)
        if limit is not None and result.remaining is not None:
            self.states[pool] = PoolState(
                used=limit - result.remaining, limit=limit, remaining=result.remaining, reset_seconds=0
            )
        return result.units

    async def state(self, pool: str) -> PoolState:
        """The pool's state without counting anything (for headers and the quota endpoint)."""
        state = await self.access.usage(self.caller.subject, pool, self.caller.allowance.budget(pool))
        self.states.setdefault(pool, state)
        return state

    async def _check(self, pool: str, units: int, allow_partial: bool) -> int:
        """A reservation that delivers nothing (HEAD): count nothing, but raise the ``RateLimited`` a real one would
        raise, so that HEAD answers as GET would. Returns the units a real one would grant."""
        state = await self.state(pool)
        if state.limit is None or state.remaining is None:
            return units
        granted = min(units, state.remaining)
        if granted < (1 if allow_partial else units):
            raise rate_limited(self.caller.allowance, pool, Denied(state.used, state.limit, state.reset_seconds))
        return granted

    def adopt(self, other: Meter) -> None:
        """Take over another meter's unsettled holdings (one tool call's meter joining its request's)."""
        self.reservations.extend(other.reservations)
        self.states.update(other.states)
        for pool, units in other.uncapped.items():
            self.uncapped[pool] = self.uncapped.get(pool, 0) + units
        other.reservations, other.uncapped = [], {}

    async def settle(self, delivered: bool) -> None:
        """Commit every reservation when the response went out, refund them all when it did not."""
        pending, self.reservations = self.reservations, []
        uncapped, self.uncapped = self.uncapped, {}
        if delivered:
            for pool, units in uncapped.items():
                await self.access.record(self.caller.subject, pool, units)
        for reservation in pending:
            if delivered:
                await self.access.commit(reservation)
            else:
                await self.access.refund(reservation)
