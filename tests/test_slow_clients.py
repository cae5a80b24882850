"""Slow senders against a real ``imagesvc serve``: every request body has a read deadline on every route that takes
one (IMAGESVC_BODY_READ_TIMEOUT, then a 408 in the JSON error shape and the connection closed), a request head that
never finishes is closed after IMAGESVC_IDLE_TIMEOUT, and a crowd of such clients leaves the node answering others.

Each client sends one byte a second, as the attack did (4,000 MCP POSTs held 70 s, none closed).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from imagesvc.catalog import Catalog
from imagesvc.catalog.api_keys import create_key
from imagesvc.web.routes import ROUTES
from tests.library import copy_library
from tests.servers import start_serve, stop_process, wait_healthy

DEADLINE = 2  # IMAGESVC_BODY_READ_TIMEOUT and IMAGESVC_IDLE_TIMEOUT of the node under test
SLACK = 6.0  # seconds past the deadline a loaded two-core machine may take to answer; a hang takes far longer
POSTS = sorted({route.full_path("/api") for route in ROUTES if route.method == "POST"})
# What each route reads (the REST upload takes a picture as it is); the page answers its errors as a page for people.
CONTENT_TYPES = {"/api/mcp": "application/json", "/search-by-image": "multipart/form-data; boundary=b0undary"}
PAGES = {"/search-by-image"}


@pytest.fixture(scope="module")
def node(demo_library: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, str]]:
    """One serving process (one worker under the master) with short deadlines: its port, and an enterprise key
    (1,000 requests a minute, so that a crowd of one caller meets the deadline rather than the request limit)."""
    data = copy_library(demo_library["data"], tmp_path_factory.mktemp("slow") / "data")
    catalog = Catalog(data / "catalog.sqlite3")
    key, _ = create_key(catalog, "enterprise", "slow clients")
    catalog.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGESVC_")}
    env |= {"IMAGESVC_DATA_DIR": str(data), "IMAGESVC_SHUTDOWN_TIMEOUT": "3"}
    env |= {"IMAGESVC_BODY_READ_TIMEOUT": str(DEADLINE), "IMAGESVC_IDLE_TIMEOUT": str(DEADLINE)}
    log = data.parent / "serve.log"
    proc, url = start_serve(env, log, "--workers", "1")
    try:
        wait_healthy(url, proc, log)
        yield int(url.rsplit(":", 1)[1]), key
    finally:
        stop_process(proc)


def _trickle(port: int, head: bytes, bound: float) -> tuple[float, bytes]:
    """Send ``head``, then one byte a second, until the server answers or closes; (seconds taken, what it sent).

    Gives up after ``bound`` seconds (the server neither answered nor closed: a hang)."""
    with socket.create_connection(("127.0.0.1", port), timeout=bound) as sock:
        sock.sendall(head)
        started = time.monotonic()
        received = b""
        sock.settimeout(1.0)
        while time.monotonic() - started < bound:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                try:
                    sock.sendall(b"x")
                except OSError:  # the server closed while we were sending
                    break
                continue
            except OSError:
                break
            if not chunk:
                break
            received += chunk
            if b"\r\n\r\n" in received and _complete(received):
                break
        return time.monotonic() - started, received


def _complete(raw: bytes) -> bool:
    head, _, body = raw.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return False


def _body_head(path: str, key: str) -> bytes:
    ctype = CONTENT_TYPES.get(path, "image/jpeg")
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\nContent-Type: {ctype}\r\n"
        "Content-Length: 100000\r\n\r\n"
    ).encode()


def _assert_408(taken: float, raw: bytes, *, page: bool = False) -> None:
    assert raw.startswith(b"HTTP/1.1 408"), f"after {taken:.1f} s the server sent {raw[:200]!r}"
    assert taken < DEADLINE + SLACK, f"the 408 came {taken:.1f} s after the head (deadline {DEADLINE} s)"
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"connection: close" in head.lower()
    if page:
        assert b"text/html" in head.lower() and b"did not arrive" in body
        return
    assert b"application/json" in head.lower()
    error = json.loads(body)
    assert error["error"] == "request_timeout" and error["message"] and error["recovery"]


def test_every_route_that_takes_a_body_has_a_read_deadline(node: tuple[int, str]) -> None:
    """Each POST route of the table, the MCP endpoint included, answers a trickled body with a 408 within the deadline
    (a bound of 40 s that only a body without deadline reaches)."""
    assert "/api/mcp" in POSTS and len(POSTS) >= 3
    for path in POSTS:
        taken, raw = _trickle(node[0], _body_head(path, node[1]), bound=40)
        _assert_408(taken, raw, page=path in PAGES)


def test_a_request_head_that_never_ends_is_closed(node: tuple[int, str]) -> None:
    """A head sent one byte a second (no blank line ever) is closed after the idle deadline, answered or not."""
    taken, raw = _trickle(node[0], b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ", bound=40)
    assert taken < DEADLINE + SLACK, f"the connection stayed open {taken:.1f} s (idle deadline {DEADLINE} s)"
    assert not raw.startswith(b"HTTP/1.1 200")


def test_many_slow_senders_leave_the_node_answering(node: tuple[int, str]) -> None:
    """200 trickled MCP bodies at once: a normal request answers while they are held, and each of them gets its 408
    within the deadline."""
    results: list[tuple[float, bytes]] = []
    lock = threading.Lock()

    def client() -> None:
        outcome = _trickle(node[0], _body_head("/api/mcp", node[1]), bound=40)
        with lock:
            results.append(outcome)

    clients = [threading.Thread(target=client) for _ in range(200)]
    for thread in clients:
        thread.start()
    started = time.monotonic()
    books = urllib.request.Request(
        f"http://127.0.0.1:{node[0]}/api/books", headers={"Authorization": f"Bearer {node[1]}"}
    )
    with urllib.request.urlopen(books, timeout=30) as resp:
        assert resp.status == 200
    assert time.monotonic() - started < DEADLINE + SLACK
    for thread in clients:
        thread.join(timeout=60)
    assert len(results) == 200
    late = [(taken, raw[:40]) for taken, raw in results if not raw.startswith(b"HTTP/1.1 408")]
    assert not late, f"{len(late)} of 200 got no 408: {late[:3]}"
    slowest = max(taken for taken, _ in results)
    assert slowest < DEADLINE + SLACK + 5, f"the last 408 came after {slowest:.1f} s"
