"""``imagesvc serve --workers N``: N processes answer on one port, share one access state exactly, drain together on
SIGTERM, reload on SIGHUP without refusing a request (one worker as several), replace a worker that dies or that
cannot reach a dependency at start (never halting the node for it), and never outlive their supervisor (gunicorn's
master); every ordering of kills and stop signals ends within the drain time with no process left; ``/metrics``
counts every worker's requests."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.servers import LogLines, PostgresServer, Redis, create_database, descendants, parents, start_serve

PAGE = "/api/image?book=demo-speculum-fornacum&page=2&tier=thumb"


def _children(pid: int) -> set[int]:
    return {child for child, parent in parents().items() if parent == pid}


def _workers(pid: int) -> set[int]:
    """The supervisor's worker processes."""
    return {child for child in _children(pid) if "imagesvc" in _cmdline(child) or _listens(child)}


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _listens(pid: int) -> bool:
    return bool(_sockets(pid))


def _sockets(pid: int) -> set[str]:
    inodes = set()
    try:
        for fd in (Path("/proc") / str(pid) / "fd").iterdir():
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        pass
    return inodes


def _server_inode(client_port: int) -> str | None:
    """The inode of the server-side socket of a loopback connection whose client end is ``client_port``."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[2].split(":")[1], 16) == client_port:
            return fields[9]
    return None


class Nodes:
    """Starts ``imagesvc serve`` processes on ports the system picks, each logging to a file of its own; kills what
    is left of them at the end of the test."""

    def __init__(self, data_dir: Path, logs: Path) -> None:
        self.data_dir, self.logs = data_dir, logs
        self.procs: dict[subprocess.Popen[bytes], LogLines] = {}

    def __call__(self, workers: int, *, wait: bool = True, **env: str) -> tuple[subprocess.Popen[bytes], int]:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("IMAGESVC_")}
        environ |= {"IMAGESVC_DATA_DIR": str(self.data_dir), "IMAGESVC_SHUTDOWN_TIMEOUT": "5"}
        environ |= {k if k.isupper() else f"IMAGESVC_{k.upper()}": v for k, v in env.items()}
        log = self.logs / f"serve-{len(self.procs)}.log"
        proc, url = start_serve(environ, log, "--workers", str(workers))
        self.procs[proc] = LogLines(log)
        port = int(url.rsplit(":", 1)[1])
        if not wait:
            return proc, port
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # every worker up: each holds its own listening socket
            if len(_workers(proc.pid)) == workers and all(_listens(w) for w in _workers(proc.pid)):
                break
            time.sleep(0.2)
        _get(port, "/health")
        return proc, port

    def log(self, proc: subprocess.Popen[bytes]) -> str:
        """What ``proc`` has written so far."""
        return "\n".join(self.procs[proc].read())


@pytest.fixture
def serve(data_dir: Path, tmp_path: Path) -> Iterator[Nodes]:
    nodes = Nodes(data_dir, tmp_path)
    yield nodes
    for proc in nodes.procs:
        for child in descendants(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _get(port: int, path: str) -> int:
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_workers_share_the_port_and_one_exact_budget(serve: Any) -> None:
    proc, port = serve(2)
    workers = _workers(proc.pid)
    assert len(workers) == 2
    answered_by = set()
    for _ in range(40):  # new connections: the kernel spreads them over the workers' sockets
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/health")
        conn.getresponse().read()
        inode = _server_inode(conn.sock.getsockname()[1])
        answered_by |= {w for w in workers if inode in _sockets(w)}
        conn.close()
    assert answered_by == workers
    # Anonymous callers get 60 requests an hour (/health is not counted): over both workers, exactly 60 are served;
    # two workers with an allowance each would serve all 66.
    statuses = [_get(port, PAGE) for _ in range(66)]
    assert statuses.count(200) == 60
    assert statuses.count(429) == 6


def test_sigterm_drains_every_worker_and_leaves_nothing(serve: Nodes) -> None:
    proc, _ = serve(2)
    workers = _workers(proc.pid)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert all(not Path(f"/proc/{w}").exists() or "zombie" in Path(f"/proc/{w}/status").read_text() for w in workers)
    assert serve.log(proc).count("draining in-flight requests") == 2


def test_a_dead_worker_is_replaced_and_a_dead_supervisor_takes_its_workers(serve: Any) -> None:
    proc, port = serve(2)
    first = _workers(proc.pid)
    os.kill(next(iter(first)), signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        now = _workers(proc.pid)
        if len(now) == 2 and now != first and all(_listens(w) for w in now):
            break
        time.sleep(0.2)
    else:
        raise AssertionError("no replacement worker")
    assert _get(port, "/health") == 200
    proc.kill()  # SIGKILL: the supervisor cannot pass anything on
    proc.wait(timeout=10)
    deadline = time.monotonic() + 20
    while any(Path(f"/proc/{w}").exists() for w in now) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(Path(f"/proc/{w}").exists() for w in now)


DRAIN = 5  # IMAGESVC_SHUTDOWN_TIMEOUT of the serve fixture
SLACK = 3.0  # seconds past the drain time a loaded two-core test machine may need to reap and exit


def _alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def _stops_within_the_drain(proc: subprocess.Popen[bytes], family: set[int], signalled: float) -> int:
    """Wait for the supervisor; asserts it exited within DRAIN + SLACK seconds of ``signalled`` and that none of
    ``family`` (every process it had) outlived it. Returns its exit status."""
    try:
        code = proc.wait(timeout=DRAIN + SLACK + 30)  # fails on a hang, with the timing below for anything slower
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the supervisor still runs {DRAIN + SLACK + 30} s after the signal") from None
    took = time.monotonic() - signalled
    assert took <= DRAIN + SLACK, f"the supervisor took {took:.1f} s to stop (drain {DRAIN} s)"
    deadline = time.monotonic() + 2  # a worker the master already reaped may still be leaving /proc
    while any(_alive(pid) for pid in family) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in family if _alive(pid)], "processes outlived the supervisor"
    return code


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.0, 0.1, 0.3, 0.6, 1.0])
def test_sigterm_just_after_a_worker_was_killed_stops_everything(serve: Any, delay: float) -> None:
    """The reported hang: SIGKILL one worker, SIGTERM the supervisor while it is (about to be) replaced."""
    for _ in range(2):
        proc, _ = serve(2)
        family = descendants(proc.pid)
        os.kill(next(iter(_workers(proc.pid))), signal.SIGKILL)
        time.sleep(delay)
        family |= descendants(proc.pid)  # the replacement, when it was already forked
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        family |= descendants(proc.pid)
        assert _stops_within_the_drain(proc, family, signalled) == 0


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.0, 0.3, 1.0, 2.0])
def test_sigterm_during_startup_stops_everything(serve: Any, delay: float) -> None:
    """SIGTERM before the workers are up (from before the master handles signals to while workers build their
    apps): the supervisor stops within the drain time and leaves no process."""
    for _ in range(2):
        proc, _ = serve(2, wait=False)
        family: set[int] = set()
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline:
            family |= descendants(proc.pid)
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        family |= descendants(proc.pid)
        # Before Python handles signals at all, SIGTERM ends the process by default: no worker exists yet then.
        assert _stops_within_the_drain(proc, family, signalled) in (0, -signal.SIGTERM)


@pytest.mark.slow
@pytest.mark.parametrize(
    "signals", [(signal.SIGTERM, signal.SIGTERM), (signal.SIGINT,), (signal.SIGINT, signal.SIGINT)], ids=str
)
def test_repeated_and_interrupt_signals_stop_everything(serve: Any, signals: tuple[signal.Signals, ...]) -> None:
    """SIGTERM twice, Ctrl-C (SIGINT) once or twice: each drains and stops within the drain time, exit status 0."""
    for _ in range(2):
        proc, _ = serve(2)
        family = descendants(proc.pid)
        for sig in signals:
            proc.send_signal(sig)
            time.sleep(0.2)
        assert _stops_within_the_drain(proc, family, time.monotonic() - 0.2 * len(signals)) == 0


BOOKS_COUNT = 'imagesvc_http_requests_total{method="GET",route="/api/books",status="200"}'


def test_metrics_add_up_every_worker(serve: Any, tmp_path: Path) -> None:
    """/metrics answers from one worker but counts the requests of all of them (prometheus multiprocess mode)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc, port = serve(2, TMPDIR=str(tmp))
    workers = _workers(proc.pid)
    answered_by = set()
    for _ in range(30):  # new connections: the kernel spreads them over the workers
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/api/books")
        conn.getresponse().read()
        inode = _server_inode(conn.sock.getsockname()[1])
        answered_by |= {w for w in workers if inode in _sockets(w)}
        conn.close()
    assert answered_by == workers  # both workers took some of them
    for _ in range(6):  # whichever worker answers, it reports the same total
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        line = next(x for x in text.splitlines() if x.startswith(BOOKS_COUNT))
        assert line.endswith(" 30.0"), line
    made = list(tmp.glob("imagesvc-metrics-*"))
    assert len(made) == 1 and list(made[0].glob("*.db"))  # the workers' metric files
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert not made[0].exists()  # the master removes its metric files on exit


def _status(port: int, path: str) -> int | str:
    """One request on a new connection, no retry: its status, or the error a refused or dropped one met."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=60) as resp:
            resp.read()
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError as exc:
        return repr(exc)


def _wait_for(predicate: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: not within {seconds} s"
        time.sleep(0.1)


@pytest.mark.parametrize("workers", [1, 2])
def test_sighup_is_a_graceful_reload_in_every_mode(serve: Nodes, workers: int) -> None:
    """SIGHUP (docs/operations.md) starts fresh workers and drains the old ones, one worker as several: the node
    never stops, and every request sent before, during and after the reload is answered. (With one worker, SIGHUP
    used to end the node: 52 of 60 requests refused.)"""
    proc, port = serve(workers)
    old = _workers(proc.pid)
    statuses: list[int | str] = []
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            statuses.append(_status(port, "/health"))
            time.sleep(0.02)  # pacing, not synchronisation: a few hundred requests over the reload

    clients = [threading.Thread(target=load) for _ in range(3)]
    for client in clients:
        client.start()
    _wait_for(lambda: len(statuses) >= 10, 60, "requests before the signal")
    proc.send_signal(signal.SIGHUP)

    # The reload is done when as many fresh workers as before listen and none of the old ones is left.
    def reloaded() -> bool:
        assert proc.poll() is None, f"the node stopped on SIGHUP (exit {proc.returncode})"
        now = _workers(proc.pid)
        return len(now) == workers and not now & old and all(map(_listens, now))

    _wait_for(reloaded, 60, "fresh workers in place of the old ones")
    during = len(statuses)
    _wait_for(lambda: len(statuses) >= during + 10, 60, "requests after the reload")
    stop.set()
    for client in clients:
        client.join(timeout=90)
    assert proc.poll() is None, "the node stopped on SIGHUP"
    refused = [s for s in statuses if s != 200]
    assert not refused, f"{len(refused)} of {len(statuses)} requests not answered: {refused[:5]}"
    assert "reloading" in serve.log(proc)


@pytest.mark.slow
def test_a_worker_that_cannot_reach_the_database_does_not_halt_the_node(
    serve: Any, postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """The database goes away and a worker dies (as when gunicorn's heartbeat kills a worker blocked on it): its
    replacement starts without the database. gunicorn used to halt the whole node then ("Worker failed to boot",
    exit 3), and it stayed down once the database was back. Now the replacement boots (a serving process opens the
    catalog lazily; one that could not boot for a dependency would be replaced, not halt the node), answers liveness
    and 503 on catalog routes, and serves once the database returns."""
    url = create_database(postgres_server, f"halt_{uuid.uuid4().hex[:12]}")
    proc, port = serve(2, data_dir=str(tmp_path / "pg"), catalog="postgres", database_url=url)
    assert _status(port, "/api/books") == 200
    before = _workers(proc.pid)
    postgres_server.stop()
    try:
        os.kill(next(iter(before)), signal.SIGKILL)
        _wait_for(lambda: len(_workers(proc.pid) - before) >= 1, 60, "a replacement worker")
        for _ in range(4):  # whichever worker answers: alive, and the catalog a 503
            assert _status(port, "/health/live") == 200 and _status(port, "/api/books") == 503
        assert proc.poll() is None
    finally:
        postgres_server.start()
    _wait_for(lambda: _status(port, "/api/books") == 200, 60, "the node answering once the database is back")
    assert proc.poll() is None


def test_a_node_started_while_redis_is_down_answers_503_until_it_returns(serve: Nodes, redis: Redis) -> None:
    """Redis (the access store) is down when the node starts: it starts, every metered route answers 503 naming no
    internal host, and it serves once Redis is back, without a restart."""
    redis.stop()
    proc, port = serve(1, access_backend="redis", redis_url=redis.url)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"http://127.0.0.1:{port}{PAGE}", timeout=30)
    error = refused.value
    body = error.read().decode()
    assert error.code == 503 and json.loads(body)["error"] == "unavailable"
    assert str(redis.port) not in body + str(error.headers), body
    redis.start()
    _wait_for(lambda: _status(port, PAGE) == 200, 30, "metered routes answering once Redis is back")
    assert proc.poll() is None


_DELIVERIES = """
import resource, sys
from pathlib import Path
from imagesvc.imaging.xmp import build_xmp
from imagesvc.provenance import Delivery
from imagesvc.provenance.credentials import ensure_local_ca
from imagesvc.provenance.sign import sign_delivery
from imagesvc.serving import tune_malloc

tuned = tune_malloc() if sys.argv[2] == "tuned" else False
data = Path(sys.argv[1])
stored = max((p for p in (data / "store" / "pub").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
paths = ensure_local_ca(data / "c2pa", "test")
delivery = Delivery("a.jpg", "0" * 64, True, "k1", "2026-01-01", "images", "inst", "ed", "https://x", "site")

def deliver():
    return sign_delivery(stored.read_bytes(), build_xmp({"requester": "k1"}), delivery, paths)

for _ in range(10):
    deliver()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(30):
    deliver()
print(tuned, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 30, stored.stat().st_size)
"""


def test_a_signed_delivery_reuses_memory_instead_of_faulting_in_fresh_pages(data_dir: Path) -> None:
    """A signed keyed delivery copies the image several times (XMP note, c2pa's input and output). With glibc's
    defaults each copy of a few hundred kilobytes is a fresh mapping, faulted in and zeroed page by page (half the
    cost of a signature, measured); ``tune_malloc``, which every serving process runs, keeps them on the heap."""

    def faults(mode: str) -> tuple[str, float, int]:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
        cmd = [sys.executable, "-c", _DELIVERIES, str(data_dir), mode]
        out = subprocess.run(cmd, env=environ, capture_output=True, text=True, check=True, timeout=120).stdout.split()
        return out[0], float(out[1]), int(out[2])

    tuned, untuned = faults("tuned"), faults("default")
    assert tuned[0] == "True" and untuned[0] == "False"
    assert tuned[2] > 300_000  # a display-sized file
    assert untuned[1] > 200  # the page faults this guards against (more than 800 a request were seen)
    assert tuned[1] < 20


@pytest.mark.parametrize(
    ("env", "applies"),
    [({}, True), ({"MALLOC_ARENA_MAX": "2"}, True), ({"MALLOC_MMAP_THRESHOLD_": "131072"}, False)],
    ids=["default", "arena-max", "operator-threshold"],
)
def test_malloc_tuning_yields_only_to_the_operators_own_thresholds(env: dict[str, str], applies: bool) -> None:
    """Container images often set MALLOC_ARENA_MAX: the thresholds are still tuned; setting one of them is the
    operator's choice and is kept."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"} | env
    cmd = [sys.executable, "-c", "from imagesvc.serving import tune_malloc; print(tune_malloc())"]
    out = subprocess.run(cmd, env=environ, capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    assert out == str(applies)


def test_workers_start_together_on_a_fresh_data_dir(serve: Nodes, tmp_path: Path) -> None:
    """No catalog yet: it is made once, before the workers start (workers creating it at once made one fail to
    boot, and gunicorn then stops the whole server). Repeated, as the race it guards against is one of timing."""
    for n in range(3):
        proc, port = serve(3, data_dir=str(tmp_path / f"fresh-{n}"))
        assert proc.poll() is None and len(_workers(proc.pid)) == 3
        assert _get(port, "/health") == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert "failed to boot" not in serve.log(proc)
