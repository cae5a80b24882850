"""Admission and a thread pool of its own for search inside a book (``search_within_book``), whose work is reading
and folding page text: seconds of CPU in a long book before its cost was made linear, and still the text tool that
costs most per request.

- **per caller**: at most ``IMAGESVC_WITHIN_BOOK_PER_CALLER`` searches of one caller (address or key) running or
  waiting at once; one more is a 429 ``rate_limited`` with ``Retry-After``, before any work. A search holds its place
  until its last piece of work has ended in its thread, even when its client went away meanwhile, so hanging up and
  asking again frees nothing early.
- **all callers**: ``IMAGESVC_WITHIN_BOOK_THREADS`` threads run searches; at most ``IMAGESVC_WITHIN_BOOK_QUEUE`` more
  wait for one; past that a search is a 503 ``unavailable`` with ``Retry-After``.

Searches run on this pool, never on the default executor that the local object store's reads and ``/health`` use.
What one search may do is bounded by ``catalog.page_rank.SearchWork``.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from imagesvc.errors import RateLimited, Unavailable

__all__ = ["PageSearchWork", "page_search_work"]

T = TypeVar("T")
RETRY_SECONDS = 2  # a search takes well under a second: a place is likely free again by then
# How long a search's piece of work may take before its caller gets a 503: a search bounded by its work budget
# (``catalog.page_rank.WORK_LIMIT``, ~0.3 s of CPU) takes well under a second even on a loaded node, so only a catalog
# that stopped answering reaches it: a hung server, which cannot enforce its own statement timeout (5 s when
# serving), or a lock held on the page texts. The work itself cannot be interrupted in its thread; it keeps its
# caller's place until it ends (``_Place``).
WORK_DEADLINE = 2.0
_WORK: weakref.WeakKeyDictionary[Any, PageSearchWork] = weakref.WeakKeyDictionary()


def page_search_work(services: Any) -> PageSearchWork:
    """The admission gate and pool of ``services`` (made on first use; one per process and settings)."""
    work = _WORK.get(services)
    if work is None:
        s = services.settings
        work = _WORK[services] = PageSearchWork(s.within_book_per_caller, s.within_book_threads, s.within_book_queue)
    return work


class _Place:
    """One admitted search: it runs its pieces of work on the pool and is let go once it has ended and its last
    piece has left its thread."""

    def __init__(self, gate: PageSearchWork, caller: str) -> None:
        self._gate, self._caller = gate, caller
        self._pending = 0
        self._ended = False
        self._loop = asyncio.get_running_loop()

    async def run(self, func: Callable[..., T], *args: Any) -> T:
        """``func(*args)`` on the pool, counted against this search's place until it returns."""
        self._pending += 1
        future: Future[T] = self._gate.pool.submit(func, *args)
        future.add_done_callback(self._from_thread)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), WORK_DEADLINE)
        except TimeoutError:
            raise Unavailable(
                f"This search inside a book had no answer from the catalog within {WORK_DEADLINE:g} s.",
                retry_after=RETRY_SECONDS,
            ) from None

    def _from_thread(self, _: Future[Any]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile (the process is ending): nothing to free
            self._loop.call_soon_threadsafe(self._piece_done)

    def _piece_done(self) -> None:
        self._pending -= 1
        self._release_if_done()

    def end(self) -> None:
        self._ended = True
        self._release_if_done()

    def _release_if_done(self) -> None:
        if self._ended and not self._pending:
            self._gate.release(self._caller)


class PageSearchWork:
    """Per-caller and waiting bounds (see the module), and the pool admitted searches run on."""

    def __init__(self, per_caller: int, threads: int, queue: int) -> None:
        self.per_caller, self.threads, self.queue = per_caller, threads, queue
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="page-search")
        self._callers: Counter[str] = Counter()
        self._held = 0

    @asynccontextmanager
    async def admit(self, caller: str) -> AsyncIterator[_Place]:
        """A place for one search of ``caller``: ``RateLimited`` (429) past the caller's share, ``Unavailable`` (503)
        when every thread is busy and the queue is full. Run the search's work with the place's ``run``."""
        if self._callers[caller] >= self.per_caller:
            raise RateLimited(
                f"You already have {self._callers[caller]} search(es) inside books running; at most "
                f"{self.per_caller} at once.",
                recovery=[f"Wait for a search to finish, then send the next (retry after {RETRY_SECONDS} seconds)."],
                details={"retry_after": RETRY_SECONDS, "limit": "within_book_concurrency"},
                headers={"Retry-After": str(RETRY_SECONDS)},
            )
        if self._held >= self.threads + self.queue:
            raise Unavailable("Searches inside books are all busy and their queue is full.", retry_after=RETRY_SECONDS)
        self._callers[caller] += 1
        self._held += 1
        place = _Place(self, caller)
        try:
            yield place
        finally:
            place.end()

    def release(self, caller: str) -> None:
        """Let go of one place of ``caller`` (its search has ended and none of its work still runs)."""
        self._held -= 1
        self._callers[caller] -= 1
        if not self._callers[caller]:
            del self._callers[caller]

    def state(self) -> dict[str, int]:
        """Searches admitted (running or waiting) and callers holding one (for tests and metrics)."""
        return {"held": self._held, "callers": len(self._callers)}
