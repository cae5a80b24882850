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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.servers import LogLines, descendants, start_serve, wait_healthy

CHUNK = 4096


@dataclass
class Node:
    """One ``imagesvc serve`` under test: its process, port and log (JSON lines, written to a file as they come)."""

    proc: subprocess.Popen[bytes]
    port: int
    log: LogLines

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read() if line.startswith("{")]

    def messages(self) -> list[str]:
        return [record.get("message", "") for record in self.records()]


def _start(data_dir: Path, log: Path, *args: str, command: list[str] | None = None, **env: str) -> Node:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("IMAGESVC_")}
    environ |= {"IMAGESVC_DATA_DIR": str(data_dir), "IMAGESVC_LOG_FORMAT": "json", **env}
    proc, url = start_serve(environ, log, *args, command=command)
    return Node(proc, int(url.rsplit(":", 1)[1]), LogLines(log))


def _serve(data_dir: Path, timeout: int, log: Path) -> Node:
    node = _start(data_dir, log, IMAGESVC_SHUTDOWN_TIMEOUT=str(timeout))
    wait_healthy(f"http://127.0.0.1:{node.port}", node.proc, log)
    return node


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


def _read_logs_until_drained(node: Node) -> list[dict[str, Any]]:
    """The server's JSON log lines up to the moment every worker logged that it is draining (its listening socket is
    closed by then); fails if the server exits first."""

    def drained(_: list[str]) -> list[dict[str, Any]] | None:
        records = node.records()
        workers = 1  # one process serves alone; a supervisor names how many workers it signalled
        for record in records:
            if found := re.search(r"SIGTERM to (\d+) workers", record.get("message", "")):
                workers = int(found[1])
        return records if sum("draining" in r.get("message", "") for r in records) == workers else None

    result: list[dict[str, Any]] = node.log.wait_for(drained, node.proc)
    return result


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
def cleanup() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        for child in descendants(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_sigterm_drains_an_in_flight_download(
    data_dir: Path, tmp_path: Path, big_image: tuple[str, bytes], cleanup: list[subprocess.Popen[bytes]]
) -> None:
    node = _serve(
        data_dir, 60, tmp_path / "serve.log"
    )  # generous: the drain ends when the download does, not by the clock
    proc, port = node.proc, node.port
    cleanup.append(proc)
    path, expected = big_image
    sock = _start_slow_download(port, path)
    raw = sock.recv(CHUNK)
    proc.send_signal(signal.SIGTERM)
    # The event, not a sleep: each worker logs "draining" once its listening socket is closed. The client has read
    # one chunk of 8 MB, so the response is certainly still in flight.
    _read_logs_until_drained(node)
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
    logs = node.records()
    access = [line for line in logs if line["logger"] == "imagesvc.access" and line["path"] == path]
    assert access and access[0]["status"] == 200 and access[0]["route"] == "/img/{path}"
    assert any("draining" in line["message"] for line in logs)


def test_shutdown_timeout_bounds_the_drain(
    data_dir: Path, tmp_path: Path, big_image: tuple[str, bytes], cleanup: list[subprocess.Popen[bytes]]
) -> None:
    """A client that stops reading cannot hold the process past IMAGESVC_SHUTDOWN_TIMEOUT (per phase: drain, then
    cancel); the process still exits 0 and the stalled client sees a truncated response."""
    node = _serve(data_dir, 1, tmp_path / "serve.log")
    proc, port = node.proc, node.port
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
def test_sigterm_stops_background_work_too(
    data_dir: Path, tmp_path: Path, cleanup: list[subprocess.Popen[bytes]], workers: int
) -> None:
    """The process (every worker) ends within the drain time although a warm-up thread would compute for 90 s more;
    nothing of it is left using CPU after "stopped"."""
    drain = 3
    command = [sys.executable, "-c", _BUSY_WARM_UP, str(workers)]
    node = _start(data_dir, tmp_path / "serve.log", command=command, IMAGESVC_SHUTDOWN_TIMEOUT=str(drain))
    proc = node.proc
    cleanup.append(proc)
    node.log.wait_for(lambda lines: sum("warm-up busy" in line for line in lines) == workers, proc)
    family = descendants(proc.pid) | {proc.pid}
    before = _cpu_seconds(family)
    # the stand-in embedding is computing: its CPU time grows (a bound only a stuck warm-up reaches)
    _wait_for(lambda: _cpu_seconds(family) > before + 0.2, 30, "the warm-up computing")
    proc.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    code = proc.wait(timeout=60)
    took = time.monotonic() - signalled
    assert code == 0 and took < drain + 3, f"exit {code} after {took:.1f} s (drain {drain} s)"
    assert any("stopped" in message for message in node.messages())
    # no thread of it computes on: every process of it gone (the warm-up would compute for 90 s more)
    _wait_for(lambda: not [pid for pid in family if Path(f"/proc/{pid}").exists()], 30, "every process gone")


def _wait_for(done: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, f"{what}: not within {seconds} s"
        time.sleep(0.05)


def _noise_jpeg(width: int, height: int) -> bytes:
    from PIL import Image

    pixels = random.Random(3).randbytes(width * height * 3)
    out = io.BytesIO()
    Image.frombytes("RGB", (width, height), pixels).save(out, "JPEG", quality=92)
    return out.getvalue()


def _search_by_image(port: int, body: bytes, outcomes: dict[int, str], n: int, sent: threading.Semaphore) -> None:
    """One client: POST the picture (``sent`` released once it is all sent), read to the end; its outcome is
    "response <status>", "closed" (a clean end with no answer) or the error it met."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
            head = (
                f"POST /api/gallery/search-by-image HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: image/jpeg\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            try:
                sock.sendall(head.encode() + body)
            finally:
                sent.release()
            raw = b""
            while chunk := sock.recv(65536):
                raw += chunk
        outcomes[n] = f"response {raw.split()[1].decode()}" if raw.startswith(b"HTTP/1.1 ") else "closed"
    except OSError as exc:
        outcomes[n] = f"error {exc!r}"


def test_sigterm_during_searches_answers_or_closes_every_client(
    data_dir: Path, tmp_path: Path, cleanup: list[subprocess.Popen[bytes]]
) -> None:
    """12 searches by image (seconds of CPU each, in worker threads), SIGTERM once every client has sent its picture:
    every client gets an answer or a clean close, and the process exits within the drain time instead of running
    every queued search first."""
    drain = 4
    node = _serve(data_dir, drain, tmp_path / "serve.log")
    proc, port = node.proc, node.port
    cleanup.append(proc)
    body = _noise_jpeg(3000, 2200)
    outcomes: dict[int, str] = {}
    sent = threading.Semaphore(0)
    clients = [threading.Thread(target=_search_by_image, args=(port, body, outcomes, n, sent)) for n in range(12)]
    for client in clients:
        client.start()
    for _ in clients:  # the event, not a sleep: every picture handed over (a bound only a hang reaches)
        assert sent.acquire(timeout=120), "a client could not send its picture"
    in_flight = 12 - len(outcomes)
    proc.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    code = proc.wait(timeout=120)
    took = time.monotonic() - signalled
    for client in clients:
        client.join(timeout=30)
    shed = any(o in ("response 429", "response 503") for o in outcomes.values())  # refused at once: nothing to drain
    assert in_flight > 0 or shed, f"every search was done before the signal ({outcomes}): nothing was in flight"
    assert code == 0 and took < drain + 3, f"exit {code} after {took:.1f} s (drain {drain} s)"
    assert len(outcomes) == 12 and all(o.startswith(("response", "closed")) for o in outcomes.values()), outcomes


@pytest.mark.parametrize("workers", [1, 2])
def test_sighup_reloads_without_cutting_an_in_flight_download(
    data_dir: Path, tmp_path: Path, big_image: tuple[str, bytes], cleanup: list[subprocess.Popen[bytes]], workers: int
) -> None:
    """SIGHUP means the same with one worker as with several (docs/operations.md, "Signals"): a graceful reload. The
    download in flight is finished whole by its old worker, which drains as on SIGTERM, and the node goes on serving
    through fresh workers. (One worker used to die of the signal at once, cutting every client.)"""
    # generous drain: the old worker's drain ends when the download does
    node = _start(data_dir, tmp_path / "serve.log", "--workers", str(workers), IMAGESVC_SHUTDOWN_TIMEOUT="60")
    proc, port = node.proc, node.port
    cleanup.append(proc)
    wait_healthy(f"http://127.0.0.1:{port}", proc, node.log.path)
    path, expected = big_image
    sock = _start_slow_download(port, path)
    raw = sock.recv(CHUNK)
    proc.send_signal(signal.SIGHUP)
    # Every old worker is draining (a bound only a hang reaches); the client has read one chunk of 8 MB, so the
    # download is still in flight.
    _wait_for(lambda: sum("draining" in message for message in node.messages()) >= workers, 60, "old workers draining")
    assert proc.poll() is None, f"the node stopped on SIGHUP (exit {proc.returncode})"
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
