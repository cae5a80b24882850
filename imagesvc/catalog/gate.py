"""The event loop's way into the catalog: every call runs on threads of the catalog's own under a client-side deadline.

A catalog read blocks its thread until the server answers, and a hung server (stopped, or a statement queued behind a
lock) cannot enforce its own ``statement_timeout``. So nothing on the event loop calls the catalog directly: it awaits
``catalog.gate.run(...)`` (or ``services.db``, the same through ``AsyncCatalog``), which

- runs the call on a bounded pool of threads that belongs to this catalog (never the loop's default executor, which
  the object store's reads and ``/health`` use): one thread for SQLite, whose one connection serialises its calls
  anyway; the pool's size for PostgreSQL;
- answers ``Unavailable`` (503 ``unavailable``) when the call has not returned within the deadline
  (``IMAGESVC_CATALOG_DEADLINE``). When the call had started (it was not merely queued behind others), the catalog
  is marked hung: from then on every call fails at once, so no queue of threads piles up behind a hung server, while
  one probe (``catalog.ping``, a read of the books table, queued behind whatever is stuck) waits on the catalog's
  own threads; when it returns, calls go through again.

Code that already runs in a worker thread (search builds, ingest, the command line) calls the catalog directly.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import warnings
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from imagesvc.errors import Unavailable

__all__ = ["DEFAULT_DEADLINE", "MAX_DEADLINE", "AsyncCatalog", "CatalogGate", "CatalogOnLoop"]

log = logging.getLogger("imagesvc.catalog.gate")

DEFAULT_DEADLINE = 1.5  # seconds: a served catalog read takes well under 100 ms at the library's size
MAX_DEADLINE = 2.0  # the promise: a hung catalog costs a request at most this long before its 503
T = TypeVar("T")


class CatalogOnLoop(RuntimeWarning):
    """A serving catalog was called on the event loop's thread, where a hung server would stop the loop."""


class CatalogGate:
    """Runs catalog calls off the event loop under ``deadline`` seconds, on at most ``threads`` threads of its own;
    ``ping`` is the probe that must return before calls go through again after a call overran its deadline.
    ``guard`` (a serving process's catalog) makes a call on the event loop's own thread warn (``CatalogOnLoop``;
    an error under the tests), so a door that bypasses the gate is found."""

    def __init__(
        self,
        ping: Callable[[], Any],
        *,
        deadline: float = DEFAULT_DEADLINE,
        threads: int = 1,
        retry: float = 0.25,
        guard: bool = False,
    ) -> None:
        if not 0 < deadline <= MAX_DEADLINE:
            raise ValueError(f"a catalog deadline is more than 0 and at most {MAX_DEADLINE:g} s, not {deadline!r}")
        self.deadline = deadline
        self._ping = ping
        self._threads = max(1, threads)
        self._retry = retry
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._hung = threading.Event()
        self._closed = False
        self.guard = guard

    def off_loop(self) -> None:
        """Warn when called on a thread that runs an event loop (the catalog's own threads run none)."""
        if self.guard and _on_a_loop():
            warnings.warn(
                "a catalog call on the event loop: await it through services.db or catalog.gate",
                CatalogOnLoop,
                stacklevel=4,
            )

    @property
    def hung(self) -> bool:
        """True from a call past its deadline until the probe returns."""
        return self._hung.is_set()

    def check(self) -> None:
        """``Unavailable`` at once while the catalog is marked hung (for work that reaches the catalog from threads
        of its own, such as a search inside a book, before it starts)."""
        if self._hung.is_set():
            raise _hung_error()

    async def run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the catalog's threads; ``Unavailable`` past the deadline or while hung."""
        self.check()
        started = threading.Event()

        def call() -> T:
            started.set()
            return fn(*args, **kwargs)

        future = asyncio.get_running_loop().run_in_executor(self._executor(), call)
        try:
            return await asyncio.wait_for(future, self.deadline)
        except TimeoutError:
            # wait_for cancelled the future: a call still queued never runs; one running finishes in its thread.
            if not started.is_set():  # queued behind others the whole time: busy, which a hang ahead also marks
                raise Unavailable(
                    f"The catalog is busy: no answer within {self.deadline:g} s.", retry_after=1
                ) from None
            self._mark_hung(getattr(fn, "__name__", "a call"))
            raise _hung_error() from None

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._closed:
                raise Unavailable("The catalog is closed: the service is stopping.", retry_after=2)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="imagesvc-catalog")
            return self._pool

    def _mark_hung(self, what: str) -> None:
        with self._lock:
            if self._hung.is_set() or self._closed:
                return
            self._hung.set()
        log.error("catalog call %s took over %g s: answering 503 until the catalog answers again", what, self.deadline)
        self._probe()

    def _probe(self) -> None:
        """Queue one ping on the catalog's threads; it runs once the stuck calls ahead of it return."""
        try:
            probe = self._executor().submit(self._ping)
        except (Unavailable, RuntimeError):  # closed meanwhile
            return
        probe.add_done_callback(self._probed)

    def _probed(self, probe: Future[Any]) -> None:
        if probe.cancelled() or self._closed:
            return
        if probe.exception() is None:
            self._hung.clear()
            log.warning("catalog answering again")
            return
        timer = threading.Timer(self._retry, self._probe)  # down rather than hung: try again shortly
        timer.daemon = True
        timer.start()

    async def answers(self) -> bool:
        """Does the catalog answer a read within the deadline now? (Readiness; a miss marks it hung as any call.)"""
        try:
            await self.run(self._ping)
        except Unavailable:
            return False
        return True

    def close(self) -> None:
        """Stop taking calls; queued ones are cancelled, running ones end with their statement."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def _on_a_loop() -> bool:
    """Is an event loop running on this thread?"""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _hung_error() -> Unavailable:
    return Unavailable(
        "The catalog database is not answering; the service recovers by itself when it answers again.", retry_after=2
    )


class AsyncCatalog:
    """A catalog seen from the event loop: ``await db.find_book(x)`` runs ``catalog.find_book(x)`` through its gate,
    and ``await db.call(f, *args)`` runs ``f(catalog, *args)`` (a helper that makes several reads, in one trip)."""

    __slots__ = ("catalog",)

    def __init__(self, catalog: Any) -> None:
        self.catalog = catalog

    def call(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Awaitable[T]:
        return self.catalog.gate.run(fn, self.catalog, *args, **kwargs)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        method = getattr(self.catalog, name)
        if not callable(method):
            raise AttributeError(f"catalog attribute {name!r} is not a call; read it from services.catalog")

        def call(*args: Any, **kwargs: Any) -> Awaitable[Any]:
            return self.catalog.gate.run(method, *args, **kwargs)  # type: ignore[no-any-return]

        return call
