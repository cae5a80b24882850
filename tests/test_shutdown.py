"""Graceful shutdown of ``imagesvc serve`` as a real process: SIGTERM stops accepting, drains in-flight requests
(bounded by IMAGESVC_SHUTDOWN_TIMEOUT), and exits 0."""

from __future__ import annotations

import json
import os
import random
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
RATE = 2e6  # bytes per second the slow client reads: 8 MB outlive SIGTERM by seconds


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
    proc, port = _serve(data_dir, timeout=20)
    cleanup.append(proc)
    path, expected = big_image
    sock = _start_slow_download(port, path)
    raw = sock.recv(CHUNK)
    proc.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    checked = False
    with sock:
        while chunk := sock.recv(CHUNK):
            raw += chunk
            time.sleep(len(chunk) / RATE)
            if not checked and time.monotonic() - signalled > 1.0:
                checked = True
                assert proc.poll() is None, "the server exited while a response was still being sent"
                with pytest.raises(ConnectionRefusedError):  # no longer accepting
                    socket.create_connection(("127.0.0.1", port), timeout=2).close()
    assert checked, "the download finished within a second of SIGTERM: it did not test draining"
    status, headers, body = _split(raw)
    assert status == 200 and int(headers["content-length"]) == len(expected)
    assert body == expected
    assert proc.wait(timeout=30) == 0
    logs = [json.loads(line) for line in proc.stderr.read().splitlines() if line.startswith("{")]  # type: ignore[union-attr]
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
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0
    assert time.monotonic() - started < 8
    with sock:
        sock.settimeout(5)
        try:
            while chunk := sock.recv(1 << 20):
                raw += chunk
        except ConnectionResetError:
            pass
    assert len(_split(raw)[2]) < len(expected)
