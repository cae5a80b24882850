"""/metrics and the JSON access log: what an operator's dashboard and log search would show."""

from __future__ import annotations

import io
import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

from imagesvc.access import MILLI
from imagesvc.access.identity import sign_session
from imagesvc.access.policy import caller_class
from imagesvc.catalog import Catalog
from imagesvc.catalog.api_keys import create_key
from imagesvc.logging_setup import configure_logging
from imagesvc.web.app_keys import ACCESS
from tests.http.conftest import MakeClient

BOOK = "demo-speculum-fornacum"
THUMB = {"book": BOOK, "page": "1", "tier": "thumb"}
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(client: TestClient) -> Samples:
    resp = await client.get("/metrics")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    samples: Samples = {}
    for family in text_string_to_metric_families(await resp.text()):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def test_requests_are_counted_by_route_template_and_status(client: TestClient) -> None:
    for book in (BOOK, BOOK, "no-such-book"):
        await (await client.get(f"/api/books/{book}")).read()
    await (await client.get("/no/such/route")).read()
    samples = await scrape(client)
    requests = "imagesvc_http_requests_total"
    assert value(samples, requests, route="/api/books/{book_id}", method="GET", status="200") == 2
    assert value(samples, requests, route="/api/books/{book_id}", method="GET", status="404") == 1
    assert value(samples, requests, route="unmatched", method="GET", status="404") == 1
    latency = "imagesvc_http_request_duration_seconds_count"
    assert value(samples, latency, route="/api/books/{book_id}", method="GET") == 3
    # Raw paths never become label values: the series count stays bounded whatever callers request.
    assert not any(BOOK in v or "no-such" in v for _, labels in samples for _, v in labels)


async def test_budget_and_request_limit_rejections_are_counted(make_client: MakeClient) -> None:
    client = await make_client()
    user = "reader-metrics"
    headers = {"Authorization": f"Bearer {sign_session(user, int(time.time()) + 3600, 'test-secret')}"}
    limit = caller_class("signed_in").budget("images")
    assert limit is not None
    access = client.server.app[ACCESS]
    assert await access.commit(await access.reserve(f"user:{user}", "images", limit * MILLI, limit * MILLI))
    resp = await client.get("/api/image", params=THUMB, headers=headers)
    assert resp.status == 429
    statuses = [(await client.get("/api/books")).status for _ in range(61)]
    assert 429 in statuses
    samples = await scrape(client)  # free: answered although the request limit is spent
    assert value(samples, "imagesvc_budget_rejections_total", pool="images", caller_class="signed_in") == 1
    assert value(samples, "imagesvc_request_limit_rejections_total", caller_class="anonymous") == statuses.count(429)


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_store_errors_are_counted_by_backend_and_kind(make_client: MakeClient) -> None:
    client = await make_client(
        storage="s3",
        s3_endpoint=f"http://127.0.0.1:{_dead_port()}",
        image_host="https://images.library.example",
        s3_access_key="test",
        s3_secret_key="test",
    )
    resp = await client.get("/api/image", params=THUMB)
    assert resp.status == 503
    assert (await resp.json())["error"] == "unavailable"
    samples = await scrape(client)
    assert value(samples, "imagesvc_store_errors_total", backend="s3", operation="get", kind="unavailable") == 1
    assert value(samples, "imagesvc_http_requests_total", route="/api/image", method="GET", status="503") == 1


def test_last_ingest_run_is_exposed(demo_library: dict[str, Any], data_dir: Path) -> None:
    """``imagesvc ingest`` (another process) leaves its summary; a serving app reports it as gauges."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGESVC_")}
    env |= {"IMAGESVC_DATA_DIR": str(data_dir), "IMAGESVC_WORKERS": "1"}
    command = [sys.executable, "-m", "imagesvc.cli", "ingest", str(demo_library["manifest"]), "--quiet", "--json"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=True)
    result = json.loads(done.stdout)
    assert (data_dir / "last-ingest.json").exists()

    from imagesvc.observability import Metrics

    text = Metrics(data_dir).render().decode()
    samples = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples["imagesvc_ingest_last_run_pages"] == result["pages"]
    assert samples["imagesvc_ingest_last_run_books_skipped"] == result["books_skipped"]
    assert samples["imagesvc_ingest_last_run_refused"] == len(result["refused"])
    assert time.time() - samples["imagesvc_ingest_last_run_finished_timestamp_seconds"] < 120
    assert "imagesvc_index_last_run_vectors" not in samples  # no index run here: nothing made up


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    buffer = io.StringIO()
    root = logging.getLogger()
    level = root.level
    handler = configure_logging("info", "json", stream=buffer)
    try:
        yield buffer
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


async def test_json_log_lines_carry_request_id_and_no_secrets(
    client: TestClient, data_dir: Path, json_log: io.StringIO
) -> None:
    catalog = Catalog(data_dir / "catalog.sqlite3")
    try:
        key, _ = create_key(catalog, "free", "log test")
    finally:
        catalog.close()
    resp = await client.get(
        f"/api/books/{BOOK}", headers={"X-Request-Id": "trace-me-42", "Authorization": f"Bearer {key}"}
    )
    assert resp.status == 200
    await (await client.get("/api/books", headers={"X-Request-Id": "anon-7"})).read()
    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]  # every line is one JSON object
    access = {line["request_id"]: line for line in lines if line["logger"] == "imagesvc.access"}
    keyed = access["trace-me-42"]
    assert keyed["route"] == "/api/books/{book_id}" and keyed["status"] == 200 and keyed["method"] == "GET"
    assert keyed["caller_class"] == "key:free" and keyed["duration_ms"] >= 0
    assert {"time", "level", "message"} <= keyed.keys()
    anonymous = access["anon-7"]
    assert anonymous["caller_class"] == "anonymous"
    assert anonymous["subject"].startswith("ip:") and "127.0.0.1" not in anonymous["subject"]
    assert key not in json_log.getvalue()


async def test_a_client_that_leaves_mid_download_is_a_499_not_a_500(
    client: TestClient, data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A reader that hangs up while its file is still being sent is logged and counted as 499, without a traceback."""
    import asyncio
    import struct

    big = data_dir / "store" / "pub" / "big-test-file.jpg"
    big.write_bytes(os.urandom(24 * 1024 * 1024))  # more than loopback socket buffers hold
    caplog.set_level(logging.DEBUG)
    loop = asyncio.get_running_loop()
    for path in ("/img/big-test-file.jpg", "/img/big-test-file.jpg"):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a slow reader
        sock.setblocking(False)
        await loop.sock_connect(sock, (client.server.host, client.server.port))
        await loop.sock_sendall(sock, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert (await loop.sock_recv(sock, 1024)).startswith(b"HTTP/1.1 200")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # hang up with a reset
        sock.close()
    requests = "imagesvc_http_requests_total"
    samples: Samples = {}
    deadline = time.monotonic() + 60  # the server notices each hang-up on its next write: a bound only a hang reaches
    while time.monotonic() < deadline:
        samples = await scrape(client)
        if value(samples, requests, route="/img/{path}", method="GET", status="499") == 2:
            break
        await asyncio.sleep(0.05)
    assert value(samples, requests, route="/img/{path}", method="GET", status="499") == 2
    assert value(samples, requests, route="/img/{path}", method="GET", status="200") == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], [r.getMessage() for r in caplog.records]
    assert [getattr(r, "status", None) for r in caplog.records if r.name == "imagesvc.access"].count(499) == 2
