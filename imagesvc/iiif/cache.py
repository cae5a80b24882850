"""The IIIF derivative cache: rendered outputs kept in the private store under ``cache/iiif/``, within a bound."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from imagesvc.storage import ObjectNotFound, ObjectStore

__all__ = ["CACHE_PREFIX", "DerivativeCache"]

CACHE_PREFIX = "cache/iiif/"
log = logging.getLogger("imagesvc.iiif")


@dataclass
class DerivativeCache:
    """Rendered outputs under ``cache/iiif/`` in the private store, bounded to ``max_bytes`` (0: no caching).

    The bound is checked on write, after every ``max_bytes / 8`` newly written bytes (and on the first write): when
    the prefix holds more than ``max_bytes``, objects are deleted in key order (content hashes, so effectively at
    random) until it holds three quarters of the bound. A listing per eighth of the bound is what we can afford on S3.
    The sweep runs as a task of its own, one at a time: the request whose write crossed the mark does not wait for it.
    """

    store: ObjectStore
    max_bytes: int
    _since_sweep: int = -1
    _sweeping: asyncio.Task[int] | None = None

    async def get(self, name: str) -> bytes | None:
        if self.max_bytes <= 0:
            return None
        try:
            return (await self.store.get(CACHE_PREFIX + name)).data
        except ObjectNotFound:
            return None

    async def put(self, name: str, data: bytes, content_type: str) -> None:
        if self.max_bytes <= 0 or len(data) > self.max_bytes // 4:
            return
        await self.store.put(CACHE_PREFIX + name, data, content_type=content_type)
        self._since_sweep = len(data) if self._since_sweep < 0 else self._since_sweep + len(data)
        due = self._since_sweep == len(data) or self._since_sweep >= self.max_bytes // 8
        if due and (self._sweeping is None or self._sweeping.done()):
            self._since_sweep = 0
            self._sweeping = asyncio.create_task(self._sweep_logged())

    async def _sweep_logged(self) -> int:
        try:
            return await self.sweep()
        except Exception as exc:  # the store is down or refused a delete: the next sweep tries again
            log.warning("IIIF cache sweep failed: %s", exc)
            return -1

    async def settled(self) -> None:
        """Wait for the sweep under way, if any."""
        if self._sweeping is not None:
            await asyncio.shield(self._sweeping)

    async def close(self) -> None:
        """Stop a sweep under way (shutdown); what it deleted stays deleted, the next start sweeps again."""
        if self._sweeping is not None and not self._sweeping.done():
            self._sweeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeping

    async def sweep(self) -> int:
        """Evict until the cache fits; returns the bytes it holds afterwards."""
        objects = [info async for info in self.store.list(CACHE_PREFIX)]
        total = sum(info.size for info in objects)
        if total <= self.max_bytes:
            return total
        for info in objects:
            if total <= self.max_bytes * 3 // 4:
                break
            await self.store.delete(info.key)
            total -= info.size
        return total
