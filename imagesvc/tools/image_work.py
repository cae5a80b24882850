"""Admission and a thread pool of its own for search by image, the most expensive request the service serves.

A search is admitted before any pixel is decoded, by three bounds that hold on every door (REST, MCP, the page):

- **per caller**: at most ``IMAGESVC_IMAGE_SEARCH_PER_CALLER`` searches of one caller (address or key) being
  uploaded, running or waiting; one more is a 429 with ``Retry-After`` before its upload is read
  (``caller_slot``), so no caller fills the node with its hourly allowance, or its memory with uploads, at once;
- **running**: at most ``IMAGESVC_IMAGE_SEARCH_THREADS`` at once, and together at most
  ``IMAGESVC_IMAGE_SEARCH_MEMORY`` bytes of decoded pixels (each search's cost is estimated from its header before
  decoding: a JPEG decoded at reduced scale costs little, a 40-megapixel PNG a lot);
- **waiting**: at most ``IMAGESVC_IMAGE_SEARCH_QUEUE`` searches wait for those; past that a search is a 503 with
  ``Retry-After``.

Decoding runs on this pool (``run``), never on the default executor that the object store's I/O and ``/health``
use; the matching engine may run its own pixel work here too (``image_work(services).run``).
"""

from __future__ import annotations

import asyncio
import io
import warnings
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from PIL import Image

from imagesvc.errors import RateLimited, Unavailable

__all__ = ["ImageWork", "decode_cost", "image_work"]

T = TypeVar("T")
RETRY_SECONDS = 5  # about what one search takes: when a slot is likely free again
_HOLDING: ContextVar[tuple[int, str] | None] = ContextVar("image_search_caller_slot", default=None)
_WORK: weakref.WeakKeyDictionary[Any, ImageWork] = weakref.WeakKeyDictionary()


def image_work(services: Any) -> ImageWork:
    """The admission gate and pool of ``services`` (made on first use; one per process and settings)."""
    work = _WORK.get(services)
    if work is None:
        s = services.settings
        work = _WORK[services] = ImageWork(
            s.image_search_per_caller, s.image_search_threads, s.image_search_queue, s.image_search_memory
        )
    return work


def decode_cost(head: bytes, side: int, unreadable: int) -> int:
    """Bytes of pixels decoding a picture whose first bytes are ``head`` will hold at most, its result reduced to
    ``side``: a JPEG decodes at a reduced DCT scale (1/2 to 1/8, no smaller than ``side``); other formats whole, in
    their mode, then reduced before the RGB conversion. A header that cannot be read from ``head`` costs
    ``unreadable``: a TIFF may keep its directory (the size) at the end of the file, past any head, so the caller
    prices it at the most a search may hold (it then runs alone), or little when ``head`` is the whole upload (junk
    that decoding refuses at once)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a header's warnings (a bomb, corrupt EXIF) are for decoding to judge
        try:
            img = Image.open(io.BytesIO(head))
        except Exception:
            return unreadable
    width, height = img.size
    if img.format in ("JPEG", "MPO"):
        scale = 1
        while scale < 8 and max(width, height) // (scale * 2) >= side:
            scale *= 2
        return -(-width // scale) * -(-height // scale) * 3 * 2
    return width * height * len(img.getbands()) + 4 * side * side * 3  # the reduced copy and its RGB, at most


class ImageWork:
    """Per-caller, running and waiting bounds (see the module), and the pool the admitted work runs on."""

    def __init__(self, per_caller: int, threads: int, queue: int, memory: int) -> None:
        self.per_caller, self.threads, self.queue, self.memory = per_caller, threads, queue, memory
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="image-search")
        self._callers: Counter[str] = Counter()
        self._running = 0
        self._held = 0
        self._waiting = 0
        self._changed: asyncio.Condition | None = None

    def _fits(self, cost: int) -> bool:
        return self._running < self.threads and self._held + cost <= self.memory

    def refuse_if_busy(self, caller: str) -> None:
        """``RateLimited`` (429) when ``caller`` already has its share of searches (uploads being read included)."""
        if self._callers[caller] >= self.per_caller:
            raise RateLimited(
                f"You already have {self._callers[caller]} search(es) by image running; at most {self.per_caller} "
                "at once.",
                recovery=["Wait for your search to finish, then send the next."],
                details={"retry_after": RETRY_SECONDS, "limit": "image_search_concurrency"},
                headers={"Retry-After": str(RETRY_SECONDS)},
            )

    @asynccontextmanager
    async def caller_slot(self, caller: str) -> AsyncIterator[None]:
        """One of ``caller``'s searches, held from before its upload is read until the search ends: an upload route
        enters it before reading the body, so parallel uploads of one caller are refused (429) unread instead of
        each buffering a picture. Within it, ``admit`` for the same caller (the tool, in the same task) uses this
        slot rather than taking another."""
        if _HOLDING.get() == (id(self), caller):
            yield
            return
        self.refuse_if_busy(caller)
        self._callers[caller] += 1
        token = _HOLDING.set((id(self), caller))
        try:
            yield
        finally:
            _HOLDING.reset(token)
            self._callers[caller] -= 1
            if not self._callers[caller]:
                del self._callers[caller]

    @asynccontextmanager
    async def admit(self, caller: str, cost: int) -> AsyncIterator[None]:
        """Hold a place for one search of ``caller`` costing ``cost`` bytes, waiting in the bounded queue if need be;
        ``RateLimited`` (429) past the caller's share, ``Unavailable`` (503) when the queue is full."""
        cost = min(cost, self.memory)  # the largest allowed picture still runs, alone
        async with self.caller_slot(caller):
            if not self._fits(cost) and self._waiting >= self.queue:
                raise Unavailable(
                    "Searches by image are all busy and the queue is full.", retry_after=RETRY_SECONDS * 2
                )
            if self._changed is None:
                self._changed = asyncio.Condition()
            changed = self._changed
            async with changed:
                self._waiting += 1
                try:
                    await changed.wait_for(lambda: self._fits(cost))
                finally:
                    self._waiting -= 1
                self._running += 1
                self._held += cost
            try:
                yield
            finally:
                async with changed:
                    self._running -= 1
                    self._held -= cost
                    changed.notify_all()

    async def run(self, func: Callable[..., T], *args: Any) -> T:
        """``func(*args)`` on this pool."""
        return await asyncio.get_running_loop().run_in_executor(self.pool, func, *args)

    def state(self) -> dict[str, int]:
        """Searches running and waiting, and the bytes of pixels they hold (for /metrics and tests)."""
        return {"running": self._running, "waiting": self._waiting, "held_bytes": self._held}
