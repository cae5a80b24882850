"""``imagesvc serve``: one process, or N worker processes on one port (SO_REUSEPORT) under a small supervisor.

Each worker is a whole app (its own hot cache, catalog handle and access client); access state is shared through the
SQLite file (WAL, exact across processes) or Redis. SIGTERM or SIGINT to the supervisor is passed to every worker,
each stops accepting and drains its in-flight requests for IMAGESVC_SHUTDOWN_TIMEOUT, and the supervisor exits 0 when
all did; SIGHUP (pull the newest catalog snapshot now) is passed on too. A worker that dies otherwise is replaced;
workers die with the supervisor (PR_SET_PDEATHSIG), so a killed supervisor leaves no process behind.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import time
from multiprocessing.process import BaseProcess
from typing import Any

from imagesvc.settings import Settings

__all__ = ["run_server", "serve", "tune_malloc"]

log = logging.getLogger("imagesvc.serve")
_RESTART_PAUSE = 1.0  # seconds between replacing a worker that died, so a crash loop does not spin
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc mallopt parameters
_MMAP_THRESHOLD = 32 << 20
_TRIM_THRESHOLD = 64 << 20


def tune_malloc() -> bool:
    """Keep glibc from mapping (and zeroing) fresh pages for every image-sized buffer; True when it applied.

    By default a buffer of a few hundred kilobytes (an image, its copy with the XMP note, c2pa's signed output) is
    mmap'ed and unmapped again on free, so every request pays page faults and page clearing for each copy: measured
    here, that was half the time of a signed delivery. Buffers below 32 MiB now come from the heap, and the heap keeps
    up to 64 MiB of freed memory per arena, so RSS stays at its high-water mark instead. Skipped when the operator
    set any ``MALLOC_*`` variable, and where the C library is not glibc.
    """
    if not sys.platform.startswith("linux") or any(name.startswith("MALLOC_") for name in os.environ):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))


def run_server(settings: Settings, *, reuse_port: bool = False) -> None:
    """Run one app in this process until SIGTERM or SIGINT, then drain for ``shutdown_timeout`` and return."""
    from aiohttp import web

    from imagesvc.app import build_app

    tune_malloc()
    app = build_app(settings)

    async def announce_drain(app: web.Application) -> None:
        # run_app has closed the listening sockets by now; in-flight requests get shutdown_timeout to finish.
        log.info("stopping: draining in-flight requests for up to %d s", settings.shutdown_timeout)

    warming: set[asyncio.Task[None]] = set()

    async def warm_search(app: web.Application) -> None:
        # The text model and the search indexes load in the background, so the first searches need not wait.
        from imagesvc.search.by_image import warm_up
        from imagesvc.web.app_keys import SERVICES

        task = asyncio.ensure_future(warm_up(app[SERVICES]))
        warming.add(task)
        task.add_done_callback(warming.discard)

    app.on_startup.append(warm_search)
    app.on_shutdown.append(announce_drain)
    web.run_app(
        app,
        host=settings.host,
        port=settings.port,
        print=None,
        access_log=None,
        shutdown_timeout=settings.shutdown_timeout,
        reuse_port=reuse_port or None,
    )


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: SIGTERM when the supervisor goes away


def _worker(settings: Settings, index: int) -> None:
    """A worker process: its own process group (a terminal's Ctrl-C reaches the supervisor only), then one app."""
    os.setpgid(0, 0)
    _die_with_parent()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # passed on by the supervisor; snapshot following installs its own
    from imagesvc.logging_setup import configure_logging

    configure_logging(settings.log_level, settings.log_format)
    log.debug("worker %d (pid %d) starting", index, os.getpid())
    run_server(settings, reuse_port=True)


class _Supervisor:
    def __init__(self, settings: Settings, workers: int) -> None:
        self.settings = settings
        self.workers = workers
        self.context = multiprocessing.get_context("spawn")
        self.procs: dict[int, BaseProcess] = {}
        self.stopping = False

    def start(self, index: int) -> None:
        proc = self.context.Process(target=_worker, args=(self.settings, index), name=f"imagesvc-worker-{index}")
        proc.start()
        self.procs[index] = proc

    def stop(self, signum: int, _frame: Any) -> None:
        if not self.stopping:
            log.info("stopping: %s to %d workers", signal.Signals(signum).name, len(self.procs))
        self.stopping = True
        for proc in self.procs.values():
            if proc.pid is not None and proc.exitcode is None:
                os.kill(proc.pid, signal.SIGTERM)

    def reload(self, _signum: int, _frame: Any) -> None:
        """SIGHUP (check for a newer catalog snapshot now) goes to every worker."""
        for proc in self.procs.values():
            if proc.pid is not None and proc.exitcode is None:
                os.kill(proc.pid, signal.SIGHUP)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        signal.signal(signal.SIGHUP, self.reload)
        for index in range(self.workers):
            self.start(index)
        while not self.stopping:
            time.sleep(0.2)
            for index, proc in list(self.procs.items()):
                if proc.exitcode is not None and not self.stopping:
                    log.error("worker %d (pid %s) exited with %s; starting another", index, proc.pid, proc.exitcode)
                    time.sleep(_RESTART_PAUSE)
                    self.start(index)
        for proc in self.procs.values():
            proc.join()
        # A worker still starting when the signal came ends by it (-SIGTERM) with nothing in flight: a clean stop.
        codes = [proc.exitcode for proc in self.procs.values()]
        failed = [code for code in codes if code not in (0, -signal.SIGTERM)]
        if failed:
            log.error("workers exited with %s", failed)
        return 1 if failed else 0


def serve(settings: Settings, workers: int) -> int:
    """Serve with ``workers`` processes (1: in this process); returns the exit code."""
    where = f"http://{settings.host}:{settings.port}"
    print(f"imagesvc serving on {where} (storage: {settings.storage}, {workers} workers)", file=sys.stderr)
    if settings.c2pa_sign:  # make the local signing CA once here, not in N racing workers
        from imagesvc.provenance.credentials import signing_paths

        signing_paths(settings)
    if workers == 1:
        run_server(settings)
        code = 0
    else:
        code = _Supervisor(settings, workers).run()
    log.info("stopped")
    return code
