"""The ingest memory budget: pages are admitted to the pool by the memory their derivation will take.

Before, only IMAGESVC_WORKERS bounded memory: at ~23 bytes a pixel a worker, a 231 Mpx PNG (an 854 KiB file can
declare that) took 5.2 GiB, and a 16-core host could need 80-90 GiB. The cost of a page is estimated from its header
alone (pixels x ``BYTES_PER_PIXEL`` + the file), before any decoding; a page starts only when its cost fits in what
the running pages leave of the budget. A page that could never fit is refused, named, instead of risking the host.
"""

from __future__ import annotations

import asyncio
import os
import warnings
from pathlib import Path

from PIL import Image

__all__ = ["BYTES_PER_PIXEL", "MemoryBudget", "default_budget", "estimate_cost"]

# Peak bytes per pixel of one page's derivation: the decoded 4-byte RGB image, then the JPEG encoder (with optimised
# Huffman tables below 40 Mpx it buffers every coefficient), then the decoded clean full marked in place. Measured
# by benchmarks/ingest_memory.py (docs/benchmarks.md): 9.2 at 231 Mpx, about 12 at 16-40 Mpx.
BYTES_PER_PIXEL = 12
_BASE = 64 << 20  # a worker's interpreter, Pillow and the fonts


def default_budget() -> int:
    """Half of this machine's physical memory."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError):
        return 4 << 30


def estimate_cost(path: Path) -> int:
    """Bytes one worker will need to derive the tiers of the master at ``path``, from its header only.

    An unreadable header costs only the file: the worker refuses it without decoding.
    """
    size = path.stat().st_size
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(path) as img:
                width, height = img.size
    except Exception:  # Pillow's errors, bombs included: the worker refuses the page with the reason
        return _BASE + size
    return _BASE + 2 * size + width * height * BYTES_PER_PIXEL


class MemoryBudget:
    """A weighted semaphore over bytes: ``async with budget.hold(cost)`` waits until ``cost`` fits."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self.peak = 0
        self._queue: list[object] = []  # first come, first served: a large page is not starved by small ones
        self._changed = asyncio.Condition()

    def fits_alone(self, cost: int) -> bool:
        return cost <= self.total

    async def acquire(self, cost: int) -> None:
        ticket = object()
        async with self._changed:
            self._queue.append(ticket)
            try:
                await self._changed.wait_for(lambda: self._queue[0] is ticket and self.used + cost <= self.total)
            finally:
                self._queue.remove(ticket)
                self._changed.notify_all()
            self.used += cost
            self.peak = max(self.peak, self.used)

    async def release(self, cost: int) -> None:
        async with self._changed:
            self.used -= cost
            self._changed.notify_all()
