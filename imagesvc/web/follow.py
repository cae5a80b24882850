"""Serve from catalog snapshots: pull the newest on start, on SIGHUP and every poll interval, and switch atomically.

``snapshot_ctx`` (an aiohttp cleanup context) and ``snapshot_middleware`` are installed by ``build_app`` when
``IMAGESVC_SNAPSHOT_PREFIX`` is set. A new generation is opened and its search snapshot built in worker threads,
then swapped in whole on the event loop (``imagesvc.web.generations``). A failed check (store down, corrupt
download, unreadable catalog or index) is logged and changes nothing: the node keeps serving the snapshot it has,
and the next check tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import signal
import sqlite3
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from imagesvc.catalog import Catalog
from imagesvc.catalog.snapshots import describe, fetch_snapshot, newest_local, read_latest
from imagesvc.errors import ImagesvcError
from imagesvc.search.engine import SearchEngine, engine_for
from imagesvc.web.generations import Generation, Generations

__all__ = ["SNAPSHOTS", "SnapshotFollower", "snapshot_ctx", "snapshot_middleware"]

log = logging.getLogger("imagesvc.catalog.snapshots")
_CHECK_ERRORS = (ImagesvcError, OSError, sqlite3.Error, ValueError, KeyError, RuntimeError)


def _discard(generation: Generation) -> None:
    generation.engine.close()  # its search work stops; it must not write into the folder removed below
    generation.catalog.close()
    if generation.folder is not None:
        shutil.rmtree(generation.folder, ignore_errors=True)


class SnapshotFollower:
    """Keeps ``services.catalog`` and ``services.search`` on the newest published snapshot."""

    def __init__(self, settings: Any, services: Any) -> None:
        self.settings, self.services = settings, services
        self.prefix = settings.snapshot_prefix.strip("/")
        self.root = Path(settings.data_dir) / "snapshots"
        self._own = (services.catalog, engine_for(services))
        self.state = Generations(Generation("", *self._own))  # the node's own catalog; build_app's context closes it
        self.rejected = ""  # a version that failed to open: not retried until LATEST moves on
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def version(self) -> str:
        """The snapshot version being served ("" before the first one)."""
        return self.state.current.version

    async def _open(self, version: str, folder: Path) -> Generation:
        """Open a pulled folder and build its search snapshot (in worker threads: nothing shares it yet)."""
        path, deadline = folder / "catalog.sqlite3", self.settings.catalog_deadline
        catalog = await asyncio.to_thread(Catalog, path, deadline=deadline, guard=True)  # served: through its gate
        try:
            engine = SearchEngine(
                self.settings, catalog, encoder=self._own[1].encoder, data_dir=folder, store=self.services.store
            )
            await engine.snapshot()  # loads the vector index and builds the gallery table off the event loop
        except BaseException:
            catalog.close()
            raise
        return Generation(version, catalog, engine, folder, on_close=_discard)

    async def _switch(self, version: str, folder: Path) -> None:
        try:
            generation = await self._open(version, folder)
        except BaseException:
            self.rejected = version
            shutil.rmtree(folder, ignore_errors=True)
            raise
        old = self.state.swap(generation)
        log.info("catalog snapshot %s in service (was %s)", version, old.version or "the local catalog")

    async def check(self) -> bool:
        """Pull and switch to the newest snapshot if it is not the one served; True when it switched.

        Raises what the store or the download raised (``StoreUnavailable``, ``SnapshotCorrupt``, ...).
        """
        async with self._lock:
            pointer = await read_latest(self.services.store, self.prefix)
            if pointer is None or pointer["version"] in (self.version, self.rejected):
                return False
            self.root.mkdir(parents=True, exist_ok=True)
            folder = await fetch_snapshot(self.services.store, self.prefix, pointer, self.root)
            await self._switch(pointer["version"], folder)
            return True

    async def check_logged(self) -> bool:
        try:
            return await self.check()
        except _CHECK_ERRORS as exc:
            log.warning("catalog snapshot check failed, still serving %s: %s", self.version or "local", describe(exc))
            return False

    def trigger(self) -> None:
        """Check now (SIGHUP)."""
        self._wake.set()

    async def _poll(self) -> None:
        interval = self.settings.snapshot_poll_seconds or None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), interval)
            self._wake.clear()
            await self.check_logged()

    async def start(self) -> None:
        """Install the live stand-ins, take the newest snapshot (or the newest pulled before, when the store is down),
        remove stale folders, and start the poller."""
        self.services.follow(self.state.active_pair)
        if not await self.check_logged() and not self.version and (folder := newest_local(self.root)) is not None:
            with contextlib.suppress(*_CHECK_ERRORS):
                await self._switch(folder.name, folder)
        if not self.version:
            log.warning("no catalog snapshot under %r yet: serving the local catalog", self.prefix)
        if self.root.is_dir():
            for entry in self.root.iterdir():
                if entry != self.state.current.folder:
                    shutil.rmtree(entry, ignore_errors=True)
        self._task = asyncio.create_task(self._poll())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.services.follow(None)
        if self.state.current.on_close is not None:  # keep the folder: a restart with the store down serves it
            self.state.current.on_close = lambda generation: generation.catalog.close()
        self.state.close()


SNAPSHOTS = web.AppKey("snapshots", SnapshotFollower)  # set while the app follows snapshots
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def snapshot_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Pin the catalog snapshot current at the start of the request for all of it."""
    follower = request.app.get(SNAPSHOTS)
    if follower is None:
        return await handler(request)
    with follower.state.pinned():
        return await handler(request)


async def snapshot_ctx(app: web.Application) -> AsyncIterator[None]:
    """Follow snapshots for the app's lifetime; SIGHUP asks for a check now (main thread only)."""
    from imagesvc.web.app_keys import SERVICES

    services = app[SERVICES]
    app[SNAPSHOTS] = follower = SnapshotFollower(services.settings, services)
    await follower.start()
    loop = asyncio.get_running_loop()
    hup = threading.current_thread() is threading.main_thread()
    if hup:
        try:
            loop.add_signal_handler(signal.SIGHUP, follower.trigger)
        except (NotImplementedError, RuntimeError, ValueError):
            hup = False
    try:
        yield
    finally:
        if hup:
            loop.remove_signal_handler(signal.SIGHUP)
        await follower.stop()
