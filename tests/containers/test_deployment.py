"""The production image and docker/compose.yaml's deployment, built and run with podman: two nodes ready, a request
at every door through each, and the database hung under them.

Skips with the reason where podman cannot run (locally); under ``CI=true`` that is a failure. The bounds are
generous, for a loaded 2-core machine: only a hang exceeds them.
"""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fixtures.generate import generate
from tests.containers.deployment import Deployment, http_status, podman, wait_for
from tests.containers.images import build_all, podman_problem
from tests.parts import missing_part

pytestmark = pytest.mark.slow

BOOK = "demo-sefer-maarekhet-ha-kokhavim"
NODES = ("app1", "app2")
ANSWER_BOUND_S = 15.0  # a hung dependency must cost a fast 503 (the service's deadline is 2 s); a hang exceeds this
RECOVERY_BOUND_S = 60.0


def _sources(root: Path) -> Path:
    """The demo sources, and a manifest of one small book beside them (image paths relative to it), readable by the
    image's unprivileged user."""
    manifest = json.loads(generate(root).read_text())
    book = [b for b in manifest["books"] if b["slug"] == BOOK]
    (root / "book.json").write_text(json.dumps({"version": 1, "books": book, "collections": []}))
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    problem = podman_problem()
    if problem:
        missing_part(problem)
    build_all()
    rig = Deployment(sources=_sources(tmp_path_factory.mktemp("sources")))
    try:
        rig.up()
        rig.tool("ingester", ["imagesvc", "ingest", "/sources/book.json", "--quiet"])
        for node in NODES:
            wait_for(f"{node} ready", lambda node=node: http_status(f"{rig.url(node)}/health/ready") == 200)
        yield rig
    except Exception:
        for service in (*NODES, "postgres", "proxy"):
            print(f"--- {service}\n{rig.logs(service)}")
        raise
    finally:
        if not os.environ.get("IMAGESVC_RIG_KEEP"):
            rig.down()


def _get(url: str, data: bytes | None = None, timeout: float = ANSWER_BOUND_S) -> tuple[int, str, bytes]:
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read()


def _public_images(value: Any, prefix: str) -> list[str]:
    """Every string under ``value`` that is a URL on the image host."""
    if isinstance(value, str):
        return [value] if value.startswith(prefix) else []
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return [url for item in items for url in _public_images(item, prefix)]


def test_both_nodes_answer_at_every_door(deployment: Deployment) -> None:
    """Each node, as compose configures it, serves the book ingested by the image's own `imagesvc ingest`: REST, an
    image, MCP's tools/list, a page, IIIF; the image host (the proxy over the bucket's public prefix) serves the
    public tier the book names; the image's HEALTHCHECK and compose's healthcheck of the node pass."""
    image_host = f"http://{deployment.proxy_ip}/img/"
    for node in NODES:
        base = deployment.url(node)
        status, _, body = _get(f"{base}/api/books")
        assert status == 200 and BOOK in body.decode(), (node, status, body[:500])
        status, _, body = _get(f"{base}/api/books/{BOOK}")
        assert status == 200, (node, status, body[:500])
        public = _public_images(json.loads(body), image_host)
        assert public, (node, "no public image URL in the book", body[:500])
        status, kind, body = _get(f"{base}/api/image?book_id={BOOK}&page=1")
        assert status == 200 and kind == "image/jpeg" and body[:2] == b"\xff\xd8", (node, status, body[:300])
        rpc = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
        status, _, body = _get(f"{base}/api/mcp", data=rpc)
        assert status == 200 and len(json.loads(body)["result"]["tools"]) >= 10, (node, status, body[:500])
        status, kind, body = _get(f"{base}/")
        assert status == 200 and kind.startswith("text/html"), (node, status, body[:500])
        status, _, body = _get(f"{base}/iiif/3/{BOOK}-1/info.json")
        assert status == 200 and json.loads(body)["width"] > 0, (node, status, body[:500])
        status, kind, body = _get(public[0])
        assert status == 200 and body[:2] == b"\xff\xd8", (public[0], status, body[:300])
        assert podman("healthcheck", "run", deployment.name(node), check=False).returncode == 0, deployment.logs(node)
        assert deployment.healthy(node), deployment.logs(node)  # compose's own health check of the node: readiness
    status, _, body = _get(f"http://{deployment.proxy_ip}/api/books")  # the proxy in front of both nodes
    assert status == 200 and BOOK in body.decode(), (status, body[:500])


def _raw(host: str, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` as it is to ``host``:80; the status, headers (lower-case names) and body of the answer."""
    with socket.create_connection((host, 80), timeout=ANSWER_BOUND_S) as conn:
        conn.sendall(request)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


@pytest.mark.parametrize(
    ("request_bytes", "expected"),
    [
        (b"GET /api/books?q=" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
        (b"GET /api/books HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 9000 + b"\r\n\r\n", 400),
        (b"GET /api/books HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n", 400),
    ],
    ids=["oversized-line", "oversized-header", "broken-framing"],
)
def test_the_proxy_answers_unreadable_requests_in_the_json_error_shape(
    deployment: Deployment, request_bytes: bytes, expected: int
) -> None:
    """What no node's HTTP parser can read is answered by the proxy, in the one JSON error shape with CORS."""
    status, headers, body = _raw(deployment.proxy_ip, request_bytes)
    assert status == expected, (status, headers, body[:300])
    assert headers["content-type"].startswith("application/json"), headers
    assert headers["access-control-allow-origin"] == "*"
    error = json.loads(body)
    assert error["error"] == "invalid_request" and error["message"] and isinstance(error["recovery"], list), error


def _timed(url: str) -> tuple[int | None, float]:
    """The status of a GET (None: no answer within the bound) and the seconds it took."""
    start = time.monotonic()
    try:
        status: int | None = _get(url)[0]
    except OSError:  # a timeout or a refused connection
        status = None
    return status, time.monotonic() - start


def test_a_hung_database_costs_fast_503s_and_liveness_never_waits(deployment: Deployment) -> None:
    """PostgreSQL frozen whole (``podman pause``: every process of it, as SIGSTOP would): both nodes stay live, say
    they are not ready and refuse catalog routes with a 503 at once, the image host keeps serving; once it resumes,
    both are ready and serve the catalog again within seconds, without a restart."""
    base = {node: deployment.url(node) for node in NODES}
    status, _, book = _get(f"{base['app1']}/api/books/{BOOK}")
    public = _public_images(json.loads(book), f"http://{deployment.proxy_ip}/img/")[0]
    podman("pause", deployment.name("postgres"))
    try:
        for node in NODES:
            for path, expected in (("/health/live", 200), ("/health/ready", 503), (f"/api/books/{BOOK}", 503)):
                status, took = _timed(f"{base[node]}{path}")
                assert status == expected and took < ANSWER_BOUND_S, (node, path, status, took, deployment.logs(node))
            status, _, body = _get(f"{base[node]}/health/ready")
            assert status == 503 and b"catalog" in body.lower(), (node, body[:500])  # names what is down
        assert _get(public)[0] == 200  # the public tier needs no catalog
    finally:
        podman("unpause", deployment.name("postgres"), check=False)
    for node in NODES:
        for url in (f"{base[node]}/health/ready", f"{base[node]}/api/books/{BOOK}"):
            wait_for(f"{url} after resume", lambda url=url: http_status(url) == 200, RECOVERY_BOUND_S)
        assert http_status(f"{base[node]}/health/live") == 200
