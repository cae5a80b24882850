"""Graceful shutdown of ``imagesvc serve`` as a real process: SIGTERM stops accepting, drains in-flight requests
(bounded by IMAGESVC_SHUTDOWN_TIMEOUT), and exits 0."""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.library import copy_library
from tests.servers import descendants

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


# A serving node whose search warm-up is still embedding or hashing (here: 90 s of CPU in a worker thread, standing
# in for a large library's first embedding) when SIGTERM comes.
_BUSY_WARM_UP = """
import asyncio, sys, time
import imagesvc.search.by_image as by_image

def embed_for_a_long_time():
    print("warm-up busy", file=sys.stderr, flush=True)
    end = time.monotonic() + 90
    while time.monotonic() < end:
        sum(range(10_000))

async def warm_up(services):
    await asyncio.to_thread(embed_for_a_long_time)

by_image.warm_up = warm_up
from imagesvc.cli import main
sys.exit(main(["serve", "--workers", sys.argv[1]]))
"""


def _cpu_seconds(pids: set[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_stops_background_work_too(data_dir: Path, cleanup: list[subprocess.Popen[str]], workers: int) -> None:
    """The process (every worker) ends within the drain time although a warm-up thread would compute for 90 s more;
    nothing of it is left using CPU after "stopped"."""
    drain = 3
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGESVC_")}
    env |= {"IMAGESVC_DATA_DIR": str(data_dir), "IMAGESVC_PORT": str(_free_port())}
    env |= {"IMAGESVC_SHUTDOWN_TIMEOUT": str(drain)}
    cmd = [sys.executable, "-c", _BUSY_WARM_UP, str(workers)]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    cleanup.append(proc)
    busy = 0
    for line in proc.stderr:  # type: ignore[union-attr]
        busy += "warm-up busy" in line
        if busy == workers:
            break
    family = descendants(proc.pid) | {proc.pid}
    time.sleep(0.5)
    assert _cpu_seconds(family) > 0.2  # the stand-in embedding is computing
    proc.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    code = proc.wait(timeout=60)
    took = time.monotonic() - signalled
    assert code == 0 and took < drain + 3, f"exit {code} after {took:.1f} s (drain {drain} s)"
    assert "stopped" in proc.stderr.read()  # type: ignore[union-attr]
    time.sleep(0.5)
    assert not [pid for pid in family if Path(f"/proc/{pid}").exists()]  # no thread of it computes on


def _noise_jpeg(width: int, height: int) -> bytes:
    from PIL import Image

    pixels = random.Random(3).randbytes(width * height * 3)
    out = io.BytesIO()
    Image.frombytes("RGB", (width, height), pixels).save(out, "JPEG", quality=92)
    return out.getvalue()


def _search_by_image(port: int, body: bytes, outcomes: dict[int, str], n: int) -> None:
    """One client: POST the picture, read to the end; its outcome is "response <status>", "closed" (a clean end
    with no answer) or the error it met."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
            head = (
                f"POST /api/gallery/search-by-image HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: image/jpeg\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            sock.sendall(head.encode() + body)
            raw = b""
            while chunk := sock.recv(65536):
                raw += chunk
        outcomes[n] = f"response {raw.split()[1].decode()}" if raw.startswith(b"HTTP/1.1 ") else "closed"
    except OSError as exc:
        outcomes[n] = f"error {exc!r}"


def test_sigterm_during_searches_answers_or_closes_every_client(
    data_dir: Path, cleanup: list[subprocess.Popen[str]]
) -> None:
    """12 searches by image (seconds of CPU each, in worker threads), SIGTERM 3 s in: every client gets an answer or a
    clean close, and the process exits within the drain time instead of running every queued search first."""
    drain = 4
    proc, port = _serve(data_dir, timeout=drain)
    cleanup.append(proc)
    body = _noise_jpeg(3000, 2200)
    outcomes: dict[int, str] = {}
    clients = [threading.Thread(target=_search_by_image, args=(port, body, outcomes, n)) for n in range(12)]
    for client in clients:
        client.start()
    time.sleep(3)
    in_flight = 12 - len(outcomes)
    proc.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    code = proc.wait(timeout=120)
    took = time.monotonic() - signalled
    for client in clients:
        client.join(timeout=30)
    shed = any(o in ("response 429", "response 503") for o in outcomes.values())  # refused at once: nothing to drain
    assert in_flight > 0 or shed, f"every search was done within 3 s ({outcomes}): nothing was in flight at the signal"
    assert code == 0 and took < drain + 3, f"exit {code} after {took:.1f} s (drain {drain} s)"
    assert len(outcomes) == 12 and all(o.startswith(("response", "closed")) for o in outcomes.values()), outcomes


@pytest.mark.parametrize("workers", [1, 2])
def test_sighup_reloads_without_cutting_an_in_flight_download(
    data_dir: Path, big_image: tuple[str, bytes], cleanup: list[subprocess.Popen[str]], workers: int
) -> None:
    """SIGHUP means the same with one worker as with several (docs/operations.md, "Signals"): a graceful reload. The
    download in flight is finished whole by its old worker, which drains as on SIGTERM, and the node goes on serving
    through fresh workers. (One worker used to die of the signal at once, cutting every client.)"""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGESVC_")}
    env |= {"IMAGESVC_DATA_DIR": str(data_dir), "IMAGESVC_PORT": str(port), "IMAGESVC_LOG_FORMAT": "json"}
    env |= {"IMAGESVC_SHUTDOWN_TIMEOUT": "60"}  # generous: the old worker's drain ends when the download does
    cmd = [sys.executable, "-m", "imagesvc.cli", "serve", "--workers", str(workers)]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    cleanup.append(proc)
    log = _collect_messages(proc)
    path, expected = big_image
    sock = _wait_and_download(port, path)
    raw = sock.recv(CHUNK)
    proc.send_signal(signal.SIGHUP)
    # Every old worker is draining (a bound only a hang reaches); the client has read one chunk of 8 MB, so the
    # download is still in flight.
    deadline = time.monotonic() + 60
    while sum("draining" in message for message in log) < workers:
        assert proc.poll() is None, f"the node stopped on SIGHUP (exit {proc.returncode})"
        assert time.monotonic() < deadline, f"the old workers did not drain: {log[-5:]}"
        time.sleep(0.05)
    with sock:
        while chunk := sock.recv(1 << 20):
            raw += chunk
    status, _, body = _split(raw)
    assert status == 200 and body == expected
    assert proc.poll() is None, "the node stopped on SIGHUP"
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=30) as resp:  # a fresh worker answers
        assert resp.status == 200
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0


def _collect_messages(proc: subprocess.Popen[str]) -> list[str]:
    """The messages of the server's JSON log lines, collected by a thread as they come."""
    messages: list[str] = []

    def read() -> None:
        with contextlib.suppress(ValueError, OSError):  # the pipe closed by the fixture's clean-up
            for line in proc.stderr:  # type: ignore[union-attr]
                if line.startswith("{"):
                    messages.append(json.loads(line).get("message", ""))

    threading.Thread(target=read, daemon=True).start()
    return messages


def _wait_and_download(port: int, path: str) -> socket.socket:
    """A slow download (``_start_slow_download``) once the node answers."""
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                if resp.status == 200:
                    return _start_slow_download(port, path)
        except OSError:
            assert time.monotonic() < deadline, "imagesvc serve did not answer /health"
            time.sleep(0.1)
