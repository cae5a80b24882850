"""Start real servers for tests (moto's S3, Ceph RGW, Redis, PostgreSQL, ``imagesvc serve``) on loopback ports, each
with a stop function.

Ports: a server that can bind port 0 does, and is asked for its port (``start_serve``, ``site_server``, moto); one
that cannot (PostgreSQL, Redis, Ceph) gets a ``free_port`` and is started again on another when the port was taken
meanwhile (``retry_port_taken``). ``refused_port`` holds a port where nothing listens, for a dead server.

Every ``start_*`` raises ``ServerUnavailable`` when the server cannot run on this machine (not installed, failed
to start); the pytest fixtures in ``tests/conftest.py`` turn that into a skip, or a failure when ``CI=true``.
No pytest imports here, so scripts and benchmarks can use these too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "LogLines",
    "Moto",
    "PortTaken",
    "PostgresServer",
    "Redis",
    "S3Server",
    "ServerUnavailable",
    "bound_socket",
    "create_database",
    "descendants",
    "free_port",
    "parents",
    "refused_port",
    "retry_port_taken",
    "serving_url",
    "site_server",
    "start_ceph_rgw",
    "start_moto",
    "start_postgres",
    "start_redis",
    "start_serve",
    "stop_process",
    "wait_healthy",
]

REPO = Path(__file__).resolve().parent.parent
CEPH_SCRIPT = REPO / "scripts" / "ceph-rgw.sh"

Stop = Callable[[], None]
T = TypeVar("T")


class ServerUnavailable(RuntimeError):
    """A test server cannot be started here; the message says why and how to fix it."""


@dataclass(frozen=True)
class S3Server:
    """How to reach a running S3-compatible server."""

    name: str
    endpoint_url: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"
    checks_signatures: bool = True  # moto accepts any secret; Ceph RGW rejects a wrong one


def parents() -> dict[int, int]:
    """Every live process's parent, read from /proc (Linux)."""
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            found[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return found


def descendants(root: int) -> set[int]:
    """Every live process whose chain of parents reaches ``root`` (``root`` itself not included)."""
    by_pid = parents()
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, ppid in by_pid.items() if ppid in frontier} - found
        found |= frontier
    return found


def wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path, *, timeout: float = 60.0) -> None:
    """Wait until ``url``/health answers 200 from the serve in ``proc``; its log's tail if it exits first."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"serve exited:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} was not healthy within {timeout:.0f} s")


SERVING_LINE = re.compile(r"imagesvc serving on (http://\S+)")


class LogLines:
    """The lines a process writes to a file, read as they come (the process writes to the file, so it never blocks
    on a reader the way a full pipe would)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[str] = []
        self._offset = 0
        self._partial = ""

    def read(self) -> list[str]:
        """Every complete line so far (new ones appended to ``lines``)."""
        try:
            with self.path.open("rb") as file:
                file.seek(self._offset)
                chunk = file.read()
        except FileNotFoundError:
            return self.lines
        self._offset += len(chunk)
        *complete, self._partial = (self._partial + chunk.decode(errors="replace")).split("\n")
        self.lines += complete
        return self.lines

    def wait_for(
        self, found: Callable[[list[str]], Any], proc: subprocess.Popen[Any] | None = None, *, timeout: float = 60.0
    ) -> Any:
        """``found(lines)`` once it is truthy, polling the file; fails when ``proc`` exits first or after
        ``timeout`` seconds (a bound only a hang reaches)."""
        deadline = time.monotonic() + timeout
        while not (result := found(self.read())):
            if proc is not None and proc.poll() is not None and not found(self.read()):
                raise RuntimeError(f"the process exited ({proc.returncode}) first:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"not seen within {timeout:.0f} s:\n{self.tail()}")
            time.sleep(0.05)
        return result

    def tail(self, chars: int = 3000) -> str:
        return "\n".join(self.read())[-chars:]


def serving_url(proc: subprocess.Popen[Any], log: Path, *, timeout: float = 60.0) -> str:
    """The base URL an ``imagesvc serve`` started with ``IMAGESVC_PORT=0`` and its standard error written to ``log``
    names in its first line: the port the system picked, asked of the server rather than guessed."""

    def address(lines: list[str]) -> str | None:
        return next((match.group(1) for line in lines if (match := SERVING_LINE.search(line))), None)

    return str(LogLines(log).wait_for(address, proc, timeout=timeout))


def start_serve(
    env: dict[str, str], log: Path, *args: str, command: list[str] | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """``imagesvc serve`` (or ``command``) on a port the system picks (``IMAGESVC_PORT=0``), standard output and error
    appended to ``log``; the process and the base URL it names. Not yet healthy: see ``wait_healthy``."""
    command = command or [sys.executable, "-m", "imagesvc.cli", "serve", *args]
    with log.open("ab") as out:
        proc = subprocess.Popen(command, env=env | {"IMAGESVC_PORT": "0"}, stdout=out, stderr=out)
    try:
        return proc, serving_url(proc, log)
    except BaseException:
        stop_process(proc)
        raise


def stop_process(proc: subprocess.Popen[Any], *, timeout: float = 30.0) -> None:
    """SIGTERM, then SIGKILL for the process and what it started if it is still there after ``timeout`` seconds."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for child in descendants(proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
            proc.kill()
            proc.wait()


def free_port() -> int:
    """A loopback TCP port that was free a moment ago (the OS picks it). Another process may take it before it is
    used: only for servers that cannot bind port 0 themselves, started through ``retry_port_taken``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bound_socket() -> socket.socket:
    """A loopback TCP socket bound to a port the system picked, not listening: the port is this socket's (no other
    process can take it) until it is handed to a server or closed, and a connection to it is refused meanwhile."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A loopback port where nothing listens and nothing can start to while the block runs: a dead server's."""
    with bound_socket() as sock:
        yield int(sock.getsockname()[1])


def site_server(make_app: Callable[[str], Any]) -> Any:
    """An aiohttp ``TestServer`` (not started) for ``make_app(url)``, where ``url`` is the address it will serve on:
    for apps whose site URL must be their own address. The port is held from the start, never guessed."""
    from aiohttp.test_utils import TestServer

    sock = bound_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    return TestServer(make_app(url), host="127.0.0.1", socket_factory=lambda *_: sock)


class PortTaken(ServerUnavailable):
    """The server could not bind its port: another process took it after ``free_port`` found it free."""


PORT_TAKEN = re.compile(r"address already in use|could not bind|port .* in use", re.IGNORECASE)


def retry_port_taken(start: Callable[[], T], *, attempts: int = 5) -> T:
    """``start()`` again (it picks a new ``free_port``) while it fails with ``PortTaken``: a stolen port never fails
    a test."""
    for attempt in range(attempts):
        try:
            return start()
        except PortTaken:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def start_moto() -> tuple[S3Server, Stop]:
    """moto's S3 server in a thread of this process (~0.5 s). It checks no signatures."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:
        raise ServerUnavailable(f"moto[server] is not installed: {exc}") from exc
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one access-log line per request drowns test output
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    info = S3Server("moto", f"http://{host}:{port}", "moto-access", "moto-secret", checks_signatures=False)
    return info, server.stop


def start_ceph_rgw(workdir: Path, *, timeout: float = 120.0) -> tuple[S3Server, Stop]:
    """A single-node Ceph cluster with RGW in ``workdir`` via ``scripts/ceph-rgw.sh`` (cold start ~15 s)."""
    if shutil.which("radosgw") is None or shutil.which("ceph-mon") is None:
        raise ServerUnavailable("Ceph RGW is not installed (scripts/install-system-deps.sh installs it)")
    return retry_port_taken(lambda: _start_ceph_rgw(workdir, timeout))


def _start_ceph_rgw(workdir: Path, timeout: float) -> tuple[S3Server, Stop]:
    port, mon_port = free_port(), free_port()
    access, secret = "imagesvc" + secrets.token_hex(6), secrets.token_hex(20)
    env = {**os.environ, "CEPH_MON_PORT": str(mon_port)}

    def stop() -> None:
        subprocess.run([str(CEPH_SCRIPT), "stop", str(workdir)], capture_output=True, timeout=60, check=False)

    try:
        done = subprocess.run(
            [str(CEPH_SCRIPT), "start", str(workdir), str(port), access, secret],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        stop()
        raise ServerUnavailable(f"Ceph RGW did not start within {timeout:.0f} s (logs in {workdir})") from exc
    if done.returncode != 0:
        stop()
        failed = PortTaken if PORT_TAKEN.search(done.stdout + done.stderr) else ServerUnavailable
        raise failed(f"Ceph RGW failed to start (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return S3Server("ceph", f"http://127.0.0.1:{port}", access, secret), stop


def _redis_command(port: int, line: bytes) -> bytes:
    """One inline command to a local Redis; its raw reply (the first 4 KiB)."""
    with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
        sock.sendall(line)
        return sock.recv(4096)


def _redis_ping(port: int) -> bool:
    try:
        return _redis_command(port, b"PING\r\n").startswith(b"+PONG")
    except OSError:
        return False


def start_redis(*, timeout: float = 10.0, extra: tuple[str, ...] = (), port: int | None = None) -> tuple[str, Stop]:
    """A throw-away ``redis-server`` on a free loopback port, persisting nothing; returns its URL and a stop.

    ``extra`` adds server arguments and ``port`` picks the port (``start_redis_cluster_node`` uses both); without
    ``port``, a port taken before the server bound it means another try on another."""
    if port is None:
        return retry_port_taken(lambda: start_redis(timeout=timeout, extra=extra, port=free_port()))
    binary = shutil.which("redis-server")
    if binary is None:
        raise ServerUnavailable("redis-server is not installed (scripts/install-system-deps.sh installs it)")
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", *extra]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def stop() -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    deadline = time.monotonic() + timeout
    while not _redis_ping(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            output = proc.communicate()[0].decode(errors="replace")[-2000:]
            failed = PortTaken if PORT_TAKEN.search(output) else ServerUnavailable
            raise failed(f"redis-server did not answer on port {port}:\n{output}")
        time.sleep(0.05)
    return f"redis://127.0.0.1:{port}/0", stop


def _cluster_port() -> int:
    """A free port at most 55535 whose cluster-bus port (10,000 higher) is free too, as a cluster node needs."""
    for _ in range(200):
        port = free_port()
        if port <= 55535:
            try:
                with socket.socket() as bus:
                    bus.bind(("127.0.0.1", port + 10_000))
            except OSError:
                continue
            return port
    raise ServerUnavailable("no free port pair (p, p + 10000) at or below 55535 for a Redis Cluster node")


def start_redis_cluster_node(workdir: Path, *, timeout: float = 10.0) -> tuple[str, Stop]:
    """A one-node Redis Cluster holding every hash slot: like any cluster, it refuses a command or script whose keys
    lie in different slots. Returns its URL (for a plain client) and a stop."""
    cluster = ("--cluster-enabled", "yes", "--cluster-config-file", str(workdir / "nodes.conf"))
    port = 0

    def start() -> tuple[str, Stop]:
        nonlocal port
        port = _cluster_port()
        return start_redis(timeout=timeout, extra=cluster, port=port)

    url, stop = retry_port_taken(start)
    try:
        if not _redis_command(port, b"CLUSTER ADDSLOTSRANGE 0 16383\r\n").startswith(b"+OK"):
            raise ServerUnavailable("redis-server refused CLUSTER ADDSLOTSRANGE (cluster commands need Redis 7)")
        deadline = time.monotonic() + timeout
        while b"cluster_state:ok" not in _redis_command(port, b"CLUSTER INFO\r\n"):
            if time.monotonic() > deadline:
                raise ServerUnavailable(f"the one-node Redis Cluster on port {port} never reached cluster_state:ok")
            time.sleep(0.05)
    except BaseException:
        stop()
        raise
    return url, stop


# ---- servers a test stops and starts again (outages) ----


class Moto:
    """A moto S3 server of this test's own, stoppable and restartable on the port it first picked (objects kept in
    memory, as a real server keeps them on disk)."""

    def __init__(self) -> None:
        try:
            from moto.server import ThreadedMotoServer
        except ImportError as exc:
            raise ServerUnavailable(f"moto[server] is not installed: {exc}") from exc

        self._make = lambda port: ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self.server = self._make(0)
        self.server.start()
        self.port = int(self.server.get_host_and_port()[1])
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.stop()

    def restart(self) -> None:
        self.server = self._make(self.port)
        self.server.start()


class Redis:
    """A throw-away redis-server that can be killed and started again on the port it first took (a port taken by
    another process before the first start bound it means a try on another)."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise ServerUnavailable("redis-server is not installed (scripts/install-system-deps.sh installs it)")
        self.binary = binary
        self.log = Path(tempfile.mkdtemp(prefix="imagesvc-redis-")) / "redis.log"
        self.proc: subprocess.Popen[bytes] | None = None
        retry_port_taken(lambda: self._start_on(free_port()))

    def _start_on(self, port: int) -> None:
        self.port = port
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.start()

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def start(self) -> None:
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        with self.log.open("wb") as log:  # this start's output only: it tells a taken port from other failures
            self.proc = subprocess.Popen(args, stdout=log, stderr=log)
        deadline = time.monotonic() + 10
        while not self._answers():
            if self.proc.poll() is not None and PORT_TAKEN.search(self.log.read_text(errors="replace")):
                raise PortTaken(f"port {self.port} was taken")
            assert time.monotonic() < deadline and self.proc.poll() is None, "redis-server did not start"
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        """Kill the server and remove its log."""
        self.stop()
        shutil.rmtree(self.log.parent, ignore_errors=True)


# ---- PostgreSQL ----

PG_BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)  # Debian's layout, newest first


@dataclass
class PostgresServer:
    """A throw-away PostgreSQL cluster on loopback: ``url`` reaches its ``imagesvc`` database; ``stop()`` and
    ``start()`` stop and restart the server on the same port and data (for outage tests)."""

    url: str
    port: int
    datadir: Path
    bindir: Path
    user: str | None  # the unprivileged account the server runs as when the tests run as root

    def _pg_ctl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        command = [str(self.bindir / "pg_ctl"), "-D", str(self.datadir), *args]
        if self.user:
            command = ["runuser", "-u", self.user, "--", *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)

    def start(self) -> None:
        log = self.datadir.parent / "server.log"
        options = f"-p {self.port} -k {self.datadir.parent} -c listen_addresses=127.0.0.1 -c fsync=off"
        options += " -c full_page_writes=off -c synchronous_commit=off -c max_connections=200"
        done = self._pg_ctl("-w", "-t", "60", "-l", str(log), "-o", options, "start")
        if done.returncode != 0:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            failed = PortTaken if PORT_TAKEN.search(tail) else ServerUnavailable
            raise failed(f"PostgreSQL did not start (exit {done.returncode}): {done.stderr}\n{tail}")

    def stop(self, mode: str = "fast") -> None:
        self._pg_ctl("-m", mode, "-w", "stop")


def _as_user(user: str | None, *command: str) -> list[str]:
    return ["runuser", "-u", user, "--", *command] if user else list(command)


def start_postgres(workdir: Path) -> tuple[PostgresServer, Stop]:
    """A PostgreSQL cluster in ``workdir`` (initdb, then pg_ctl on a free loopback port, ~2 s), with an empty
    ``imagesvc`` database and trust authentication on loopback. As root the server runs as ``nobody`` (PostgreSQL
    refuses to run as root) in a temp folder of its own instead of ``workdir``."""
    bindir = next((d for d in PG_BIN_DIRS if (d / "initdb").exists()), None)
    if bindir is None:
        found = shutil.which("initdb")
        bindir = Path(found).parent if found else None
    if bindir is None:
        raise ServerUnavailable("PostgreSQL is not installed (scripts/install-system-deps.sh installs postgresql)")
    user = None
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            raise ServerUnavailable("running as root and runuser is missing: PostgreSQL cannot run as root")
        user = "nobody"
    if user:
        # A folder of its own under the system temp dir, owned by that user: pytest keeps its own temp root private
        # (0700) and may reset it at any time, which would lock the server out of a data dir inside it.
        workdir = Path(tempfile.mkdtemp(prefix="imagesvc-postgres-"))
        shutil.chown(workdir, user)
    else:
        workdir.mkdir(parents=True, exist_ok=True)
    datadir = workdir / "pgdata"
    init = subprocess.run(
        _as_user(
            user,
            str(bindir / "initdb"),
            "-D",
            str(datadir),
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--locale=C",
        ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if init.returncode != 0:
        raise ServerUnavailable(f"initdb failed (exit {init.returncode}): {init.stderr[-2000:]}")

    def start() -> PostgresServer:
        port = free_port()
        server = PostgresServer(f"postgresql://postgres@127.0.0.1:{port}/imagesvc", port, datadir, bindir, user)
        server.start()
        return server

    server = retry_port_taken(start)

    def stop() -> None:
        server.stop("immediate")
        if user:
            shutil.rmtree(workdir, ignore_errors=True)

    try:
        create_database(server, "imagesvc")
    except RuntimeError as exc:
        stop()
        raise ServerUnavailable(str(exc)[-2000:]) from exc
    return server, stop


def create_database(server: PostgresServer, name: str, *options: str) -> str:
    """A new empty database on ``server``; its URL (each test that needs a clean catalog takes one). ``options`` go
    to ``createdb`` (a locale, say)."""
    done = subprocess.run(
        [str(server.bindir / "createdb"), "-h", "127.0.0.1", "-p", str(server.port), "-U", "postgres", *options, name],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"createdb {name} failed: {done.stderr}")
    return f"postgresql://postgres@127.0.0.1:{server.port}/{name}"


def migrate_postgres_to(conn: Any, version: int) -> None:
    """Bring an empty database (``conn``, autocommit) to schema ``version`` as an imagesvc of that version left it:
    for tests of a later migration on a populated older catalog."""
    from imagesvc.catalog.schema import POSTGRES_MIGRATIONS

    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    for number, script in enumerate(POSTGRES_MIGRATIONS[:version], 1):
        conn.execute(script)
        conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (number,))
