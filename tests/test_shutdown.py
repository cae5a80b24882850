"""Graceful shutdown of ``imagesvc serve`` as a real process: SIGTERM stops accepting, drains in-flight requests
(bounded by IMAGESVC_SHUTDOWN_TIMEOUT), and exits 0."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.library import copy_library

CHUNK = 4096


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def data_dir(demo_library: dict[str, Any], tmp_path: Path) -> Path:
    return copy_library(demo_library["data"], tmp_path / "data")


def _serve(data_dir: Path, timeout: int) -> tuple[subprocess.Popen[str], int]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGESVC_")}
    env |= {
        "IMAGESVC_DATA_DIR": str(data_dir),
        "IMAGESVC_PORT": str(port),
        "IMAGESVC_LOG_FORMAT": "json",
        "IMAGESVC_SHUTDOWN_TIMEOUT": str(timeout),
    }
    proc = subprocess.Popen([sys.executable, "-m", "imagesvc.cli", "serve"], env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as resp:
                if resp.status == 200:
                    return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"imagesvc serve did not answer /health: {proc.communicate()[1][-2000:]}")


@pytest.fixture
def big_image(data_dir: Path) -> tuple[str, bytes]:
    """An 8 MB object under the public prefix, served by /img/ like any full-tier scan.

    The demo's images (under 1 MB) fit in the kernel's loopback socket buffers (about 3 MB here), so the server would
    be done with them at once; a large scan is what keeps a download in flight. Its bytes are random: /img/ serves
    objects as stored, so only the size matters.
    """
    data = random.Random(8).randbytes(8 << 20)
    target = data_dir / "store" / "pub" / "large" / "1-full-0badcafe.jpg"
    target.parent.mkdir(parents=True)
    target.write_bytes(data)
    return "/img/large/1-full-0badcafe.jpg", data


def _read_logs_until_drained(proc: subprocess.Popen[str]) -> list[dict[str, Any]]:
    """The server's JSON log lines up to the moment every worker logged that it is draining (its listening socket is
    closed by then); fails if the server exits first."""
    logs: list[dict[str, Any]] = []
    workers = 1  # one process serves alone; a supervisor names how many workers it signalled
    for line in proc.stderr:  # type: ignore[union-attr]
        if line.startswith("{"):
            logs.append(json.loads(line))
            if found := re.search(r"SIGTERM to (\d+) workers", logs[-1].get("message", "")):
                workers = int(found[1])
            if sum("draining" in entry.get("message", "") for entry in logs) == workers:
                return logs
    raise AssertionError(f"the server exited before all its workers were draining: {logs[-5:]}")


def _start_slow_download(port: int, path: str) -> socket.socket:
    """A client with a tiny receive buffer, so the server cannot hand the whole response to the kernel at once."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, CHUNK)
    sock.connect(("127.0.0.1", port))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
    return sock


def _split(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


@pytest.fixture
def cleanup() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()  # reaps the process and closes its stderr pipe


def test_sigterm_drains_an_in_flight_download(
    data_dir: Path, big_image: tuple[str, bytes], cleanup: list[subprocess.Popen[str]]
) -> None:
    proc, port = _serve(data_dir, timeout=60)  # generous: the drain ends when the download does, not by the clock
    cleanup.append(proc)
    path, expected = big_image
    sock = _start_slow_download(port, path)
    raw = sock.recv(CHUNK)
    proc.send_signal(signal.SIGTERM)
    # The event, not a sleep: each worker logs "draining" once its listening socket is closed. The client has read
    # one chunk of 8 MB, so the response is certainly still in flight.
    logs = _read_logs_until_drained(proc)
    assert proc.poll() is None, "the server exited while a response was still being sent"
    with pytest.raises(ConnectionRefusedError):  # no longer accepting
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    with sock:
        while chunk := sock.recv(1 << 20):
            raw += chunk
    status, headers, body = _split(raw)
    assert status == 200 and int(headers["content-length"]) == len(expected)
    assert body == expected
    assert proc.wait(timeout=60) == 0  # a bound that fails only on a hang
    logs += [json.loads(line) for line in proc.stderr.read().splitlines() if line.startswith("{")]  # type: ignore[union-attr]
    access = [line for line in logs if line["logger"] == "imagesvc.access" and line["path"] == path]
    assert access and access[0]["status"] == 200 and access[0]["route"] == "/img/{path}"
    assert any("draining" in line["message"] for line in logs)


def test_shutdown_timeout_bounds_the_drain(
    data_dir: Path, big_image: tuple[str, bytes], cleanup: list[subprocess.Popen[str]]
) -> None:
    """A client that stops reading cannot hold the process past IMAGESVC_SHUTDOWN_TIMEOUT (per phase: drain, then
    cancel); the process still exits 0 and the stalled client sees a truncated response."""
    proc, port = _serve(data_dir, timeout=1)
    cleanup.append(proc)
    path, expected = big_image
    sock = _start_slow_download(port, path)
    raw = sock.recv(CHUNK)
    proc.send_signal(signal.SIGTERM)
    # The client never reads again, so without the timeout the process would wait forever: a generous bound that fails
    # only on such a hang (the timeout is 1 s per phase), not a measure of speed.
    assert proc.wait(timeout=60) == 0
    with sock:
        sock.settimeout(30)
        with contextlib.suppress(ConnectionResetError):  # the server may reset the abandoned connection: also a cut
            while chunk := sock.recv(1 << 20):
                raw += chunk
    assert len(_split(raw)[2]) < len(expected)
