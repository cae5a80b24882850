"""``imagesvc serve --workers N``: N processes answer on one port, share one access state exactly, drain together on
SIGTERM, replace a worker that dies, and never outlive their supervisor."""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.library import copy_library
from tests.servers import free_port

PAGE = "/api/image?book=demo-speculum-fornacum&page=2&tier=thumb"


@pytest.fixture
def data_dir(demo_library: dict[str, Any], tmp_path: Path) -> Path:
    return copy_library(demo_library["data"], tmp_path / "data")


def _children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found


def _workers(pid: int) -> set[int]:
    """The supervisor's worker processes (multiprocessing's resource tracker is a child too, but holds no socket)."""
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


@pytest.fixture
def serve(data_dir: Path) -> Iterator[Any]:
    procs: list[subprocess.Popen[str]] = []

    def start(workers: int, **env: str) -> tuple[subprocess.Popen[str], int]:
        port = free_port()
        environ = {k: v for k, v in os.environ.items() if not k.startswith("IMAGESVC_")}
        environ |= {"IMAGESVC_DATA_DIR": str(data_dir), "IMAGESVC_PORT": str(port), "IMAGESVC_SHUTDOWN_TIMEOUT": "5"}
        environ |= {f"IMAGESVC_{k.upper()}": v for k, v in env.items()}
        cmd = [sys.executable, "-m", "imagesvc.cli", "serve", "--workers", str(workers)]
        proc = subprocess.Popen(cmd, env=environ, stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # every worker up: each holds its own listening socket
            if len(_workers(proc.pid)) == workers and all(_listens(w) for w in _workers(proc.pid)):
                break
            time.sleep(0.2)
        _get(port, "/health")
        return proc, port

    yield start
    for proc in procs:
        for child in _children(proc.pid):
            os.kill(child, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


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


def test_sigterm_drains_every_worker_and_leaves_nothing(serve: Any) -> None:
    proc, _ = serve(2)
    workers = _workers(proc.pid)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert all(not Path(f"/proc/{w}").exists() or "zombie" in Path(f"/proc/{w}/status").read_text() for w in workers)
    log = proc.stderr.read()  # type: ignore[union-attr]
    assert log.count("draining in-flight requests") == 2


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


def test_sighup_stops_neither_the_supervisor_nor_its_workers(serve: Any) -> None:
    proc, port = serve(2)
    workers = _workers(proc.pid)
    proc.send_signal(signal.SIGHUP)  # "check for a newer snapshot now": a default SIGHUP would end the supervisor
    time.sleep(1)
    assert proc.poll() is None and _workers(proc.pid) == workers
    assert _get(port, "/health") == 200
