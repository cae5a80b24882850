"""``imagesvc serve``: N worker processes (one or more) on one port under gunicorn's master.

gunicorn (with aiohttp's own gunicorn worker) supervises the workers, one of them as much as several, so that every
node answers signals alike: the master binds the one listening socket every worker inherits, replaces a worker that
dies, and on SIGTERM or SIGINT sends SIGTERM to every worker and waits IMAGESVC_SHUTDOWN_TIMEOUT for them (each stops
accepting and drains its in-flight requests for most of that time) before killing what is left. SIGHUP is gunicorn's
graceful reload: fresh workers start (re-opening the catalog, the newest catalog snapshot, credentials, models and
indexes), the old ones drain as on SIGTERM; the listening socket stays open throughout, so no connection is refused.
Signals that arrive while a worker is being replaced or is still starting are queued and handled in order, so the
master always stops. Workers die with the master (PR_SET_PDEATHSIG). ``/metrics`` adds up every worker's counters
through prometheus-client's multiprocess mode (a temporary directory the master makes and removes).

A node outlives its dependencies: a worker whose app cannot start because a dependency is down (``Unavailable``, a
refused or timed-out connection) waits ``BOOT_RETRY_SECONDS`` and exits to be replaced, instead of the boot failure
that makes gunicorn halt the whole node. A worker's heartbeat (what gunicorn's ``timeout`` watches) beats from its
event loop for its whole life, starting, serving and draining, so a worker is replaced only when its loop is blocked.

Each worker is a whole app (its own hot cache, catalog handle and access client); access state is shared through the
SQLite file (WAL, exact across processes) or Redis.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from imagesvc.errors import Unavailable
from imagesvc.settings import Settings

if TYPE_CHECKING:
    from aiohttp.web_protocol import RequestHandler

__all__ = ["BOOT_RETRY_SECONDS", "serve", "tune_malloc"]

log = logging.getLogger("imagesvc.serve")
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc mallopt parameters
_MMAP_THRESHOLD = 32 << 20
_TRIM_THRESHOLD = 64 << 20
# The operator's own choice of the two thresholds tune_malloc sets; other MALLOC_* variables (MALLOC_ARENA_MAX, which
# container images often set) tune something else and leave these two to us.
_THRESHOLD_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
_THRESHOLD_TUNABLES = ("glibc.malloc.mmap_threshold", "glibc.malloc.trim_threshold")
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
WORKER_TIMEOUT = 120  # seconds a worker's event loop may go without a heartbeat before gunicorn replaces the worker
BOOT_RETRY_SECONDS = 2.0  # a worker that could not start for a dependency waits this long before it is replaced
FIRST_REQUEST_GRACE = 1.0  # seconds a stopping worker waits for the first request of a connection it just accepted
ACCEPT_SETTLE = 0.1  # seconds for the connections accepted just before the listening socket closed to be set up


def tune_malloc() -> bool:
    """Keep glibc from mapping (and zeroing) fresh pages for every image-sized buffer; True when it applied.

    By default a buffer of a few hundred kilobytes (an image, its copy with the XMP note, c2pa's signed output) is
    mmap'ed and unmapped again on free, so every request pays page faults and page clearing for each copy: measured
    here, that was half the time of a signed delivery. Buffers below 32 MiB now come from the heap, and the heap keeps
    up to 64 MiB of freed memory per arena, so RSS stays at its high-water mark instead. Skipped when the operator set
    either threshold (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` or their ``GLIBC_TUNABLES``), and where
    the C library is not glibc; other ``MALLOC_*`` variables (``MALLOC_ARENA_MAX``) do not stop it.
    """
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if (
        not sys.platform.startswith("linux")
        or any(name in os.environ for name in _THRESHOLD_VARIABLES)
        or any(name in tunables for name in _THRESHOLD_TUNABLES)
    ):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))


def _die_with_parent(parent: int) -> None:
    """SIGTERM this process when ``parent`` goes away (Linux); exits now if it already has."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(0)


def _requests_read(conn: RequestHandler) -> int:
    """How many requests ``conn`` has parsed: aiohttp keeps that count only in a private slot (``_request_count``).

    tests/http/test_aiohttp_private.py fails when a release drops or renames it; until then such a release makes this
    1 for every connection, which is aiohttp's own behaviour (no connection waited for).
    """
    return int(getattr(conn, "_request_count", 1))


async def _first_requests(server: Any, grace: float) -> None:
    """Wait (at most ``grace`` seconds) until every open connection has sent its first request head.

    The first ``ACCEPT_SETTLE`` seconds are always waited: asyncio makes a connection accepted just before the
    listening socket closed in a task of its own, so it may not be among ``server.connections`` yet.
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.sleep(ACCEPT_SETTLE)
    # A connection that has sent no request yet would be taken for an idle keep-alive one and closed unanswered.
    while any(_requests_read(conn) == 0 for conn in server.connections):
        if loop.time() - started >= grace:
            return
        await asyncio.sleep(0.02)


async def _beat(notify: Callable[[], None], every: float) -> None:
    """Call ``notify`` every ``every`` seconds for as long as the event loop runs."""
    while True:
        notify()
        await asyncio.sleep(every)


def _dependency_down(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) says a dependency is unreachable, not that the app is broken."""
    from imagesvc.errors import Unavailable

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, Unavailable | ConnectionError | TimeoutError | socket.gaierror):
            return True  # ours, or a connection refused, reset, timed out, or a name that does not resolve
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _leave(code: int) -> None:
    """End this process now with ``code``, log lines flushed, without waiting for worker threads.

    Called once the app has drained and closed: a thread still computing (an embedding or hashing job, a search
    whose request was cancelled) would otherwise keep the process, and its CPU, until it finished.
    """
    busy = [t.name for t in threading.enumerate() if t is not threading.current_thread() and not t.daemon]
    if busy:
        log.info("stopped; ending %d background threads with the process", len(busy))
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def listen_any_port(host: str) -> socket.socket:
    """A listening socket on ``host`` at a port the system picks (``IMAGESVC_PORT=0``), inherited by every worker."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _gunicorn_application(
    settings: Settings, workers: int, multiproc_dir: str, listener: socket.socket | None = None
) -> Any:
    """The gunicorn application (master and workers) for ``settings``; on ``listener`` when one is given."""
    from aiohttp import web
    from aiohttp.worker import GunicornWebWorker
    from gunicorn.app.base import BaseApplication
    from gunicorn.arbiter import Arbiter
    from gunicorn.glogging import Logger

    class Worker(GunicornWebWorker):  # type: ignore[misc]
        """aiohttp's gunicorn worker with a heartbeat for its whole life, a dependency outage at start that is not a
        boot failure, and a process that ends once drained. SIGHUP reaches the master, not the workers."""

        def init_signals(self) -> None:
            super().init_signals()
            # A SIGHUP sent to a worker directly (or to the process group) must not end it: snapshot following
            # takes it as "check now", and a worker without following ignores it.
            signal.signal(signal.SIGHUP, signal.SIG_IGN)

        async def _run(self) -> None:
            # aiohttp's worker beats only from its serving loop; this beats from the event loop for the worker's
            # whole life (building the app, serving, draining): a worker is replaced only when its loop is blocked.
            heartbeat = asyncio.ensure_future(_beat(self.notify, 1.0))
            try:
                await super()._run()
            finally:
                heartbeat.cancel()

        def run(self) -> None:
            try:
                super().run()  # ends with sys.exit once the app has drained and closed
            except SystemExit as exc:
                _leave(exc.code if isinstance(exc.code, int) else 0)
            except Exception as exc:
                if self.booted or not _dependency_down(exc):
                    raise  # a fault of the app itself: gunicorn halts rather than respawn it for ever
                # Not a boot failure: gunicorn would halt the node, which would then stay down once the dependency
                # is back. Wait a little (no respawn storm) and exit so that the master starts a fresh worker.
                log.error("worker could not start, a dependency is down (retry in %g s): %s", BOOT_RETRY_SECONDS, exc)
                time.sleep(BOOT_RETRY_SECONDS)
                _leave(1)

    class Master(Arbiter):  # type: ignore[misc]
        """gunicorn's arbiter with imagesvc's signals: SIGINT drains like SIGTERM; SIGHUP is a graceful reload."""

        def handle_term(self) -> None:
            log.info("stopping: SIGTERM to %d workers", len(self.WORKERS))
            super().handle_term()

        def handle_int(self) -> None:
            log.info("stopping: SIGINT, so SIGTERM to %d workers", len(self.WORKERS))
            super().handle_term()

        def handle_hup(self) -> None:
            log.info("reloading: SIGHUP, so %d fresh workers start and the old ones drain", self.num_workers)
            self.reload()

    class RootLogger(Logger):  # type: ignore[misc]
        """gunicorn's messages through imagesvc's logging (text or JSON lines on stderr), not handlers of its own."""

        def setup(self, cfg: Any) -> None:
            self.error_log.propagate = True
            self.access_log.propagate = False  # requests are logged by imagesvc's own access log

    def post_fork(_arbiter: Any, worker: Any) -> None:
        # Until the worker sets its own handlers it has the master's, which would queue a SIGTERM and lose it.
        def stop_early(_signum: int, _frame: Any) -> None:
            worker.alive = False

        signal.signal(signal.SIGTERM, stop_early)
        signal.signal(signal.SIGINT, stop_early)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        _die_with_parent(worker.ppid)
        tune_malloc()

    def child_exit(_arbiter: Any, worker: Any) -> None:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid, multiproc_dir)

    class Runner(web.AppRunner):
        """aiohttp's runner, whose drain answers the connections accepted just before the listening socket closed.

        aiohttp closes every connection without a request in progress when it drains, including one accepted a moment
        ago whose request is still on its way: on a reload (SIGHUP) that client would see its connection dropped
        although the node goes on serving. So the drain stops accepting first and lets those requests arrive.
        """

        async def cleanup(self) -> None:
            for site in list(self.sites):
                await site.stop()
            if self.server is not None:
                await _first_requests(self.server, FIRST_REQUEST_GRACE)
            await super().cleanup()

    async def make_runner() -> web.AppRunner:
        from imagesvc.app import build_serving_app

        # The master's drain is graceful_timeout; the app drains for most of it, then cancels and closes.
        drain = max(settings.shutdown_timeout * 0.8, settings.shutdown_timeout - 2.0)
        return Runner(
            build_serving_app(settings),
            access_log=None,
            shutdown_timeout=drain,
            keepalive_timeout=settings.idle_timeout,  # also bounds a request head that never finishes arriving
        )

    address = f"[{settings.host}]:{settings.port}" if ":" in settings.host else f"{settings.host}:{settings.port}"
    options: dict[str, Any] = {
        "bind": f"fd://{listener.fileno()}" if listener is not None else address,
        "workers": workers,
        "worker_class": Worker,
        "graceful_timeout": settings.shutdown_timeout,
        "timeout": WORKER_TIMEOUT,
        "logger_class": RootLogger,
        "post_fork": post_fork,
        "child_exit": child_exit,
        "control_socket_disable": True,
        "proc_name": "imagesvc",
    }

    class Application(BaseApplication):  # type: ignore[misc]
        def load_config(self) -> None:
            for key, value in options.items():
                self.cfg.set(key, value)

        def load(self) -> Callable[[], Any]:
            return make_runner

        def run(self) -> None:
            Master(self).run()

    return Application()


def _serve_workers(settings: Settings, workers: int, listener: socket.socket | None) -> int:
    """``workers`` processes under gunicorn's master; its exit code."""
    master = os.getpid()
    multiproc_dir = tempfile.mkdtemp(prefix="imagesvc-metrics-")
    # Every worker's metrics go to files here (read before any metric exists: see observability.Metrics).
    os.environ[MULTIPROC_ENV] = multiproc_dir
    try:
        _gunicorn_application(settings, workers, multiproc_dir, listener).run()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    finally:
        if os.getpid() == master:
            shutil.rmtree(multiproc_dir, ignore_errors=True)
            os.environ.pop(MULTIPROC_ENV, None)
    if os.getpid() != master:  # a worker leaving gunicorn's fork by sys.exit (it failed to boot): not the master
        _leave(code)
    return code


def serve(settings: Settings, workers: int) -> int:
    """Serve with ``workers`` processes under one master; returns the exit code (the process ends with it).

    With port 0 the system picks a free port, bound here before anything else: the first line on standard error
    names it, so a caller (a test, a supervisor) asks for its port instead of guessing a free one.
    """
    listener = listen_any_port(settings.host) if settings.port == 0 else None
    port = listener.getsockname()[1] if listener is not None else settings.port
    where = f"http://[{settings.host}]:{port}" if ":" in settings.host else f"http://{settings.host}:{port}"
    print(f"imagesvc serving on {where} (storage: {settings.storage}, {workers} workers)", file=sys.stderr)
    # Make the local signing CA, and create or migrate the catalog, once here: not in N racing workers (two workers
    # creating one catalog's tables at once made one fail to start).
    if settings.c2pa_sign:
        from imagesvc.provenance.credentials import signing_paths

        signing_paths(settings)
    from imagesvc.catalog.backends import open_catalog

    try:
        open_catalog(settings).close()  # the configured backend: a PostgreSQL node keeps no SQLite catalog
    except Unavailable as exc:  # the database is down or hung: start anyway; each worker migrates on first reach
        log.warning("starting without the catalog database (503 on catalog routes until it answers): %s", exc.message)
    code = _serve_workers(settings, workers, listener)
    log.info("stopped")
    _leave(code)
    return code  # not reached
