"""Callers, budgets, request limits and their headers over HTTP: what a client of /api/image and friends sees."""

from __future__ import annotations

import asyncio
import io
import re
import socket
import struct
import time
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient
from PIL import Image

from imagesvc.access import MILLI
from imagesvc.access.identity import sign_session
from imagesvc.catalog import Catalog
from imagesvc.catalog.api_keys import create_key, revoke_key
from imagesvc.web.app_keys import ACCESS

THUMB = {"book": "demo-speculum-fornacum", "page": "1", "tier": "thumb"}


def _key(data_dir: Path, tier: str, **kwargs: Any) -> tuple[str, str]:
    catalog = Catalog(data_dir / "catalog.sqlite3")
    try:
        key, record = create_key(catalog, tier, f"test {tier}", **kwargs)
    finally:
        catalog.close()
    return key, record.id


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def _consume(client: TestClient, subject: str, pool: str, units: int, limit: int | None) -> None:
    """Spend ``units`` of a subject's pool directly in the access backend (as earlier traffic would have)."""
    access = client.server.app[ACCESS]
    reservation = await access.reserve(subject, pool, units * MILLI, None if limit is None else limit * MILLI)
    assert await access.commit(reservation)


async def test_anonymous_headers_state_both_limits(client: TestClient) -> None:
    resp = await client.get("/api/image", params=THUMB)
    assert resp.status == 200
    assert resp.headers["RateLimit-Policy"] == '"images";q=500;w=86400, "requests";q=60;w=3600'
    assert resp.headers["RateLimit"].startswith('"images";r=499, "requests";r=59')


async def test_exact_budget_under_a_concurrent_burst(client: TestClient, data_dir: Path) -> None:
    """1,000 concurrent image requests against 500 remaining units: exactly 500 images are delivered."""
    token = sign_session("reader-1", int(time.time()) + 3600, "test-secret")
    await _consume(client, "user:reader-1", "images", 500, 1000)  # a signed-in reader has 500 of 1,000 left
    headers = {"Authorization": f"Bearer {token}"}

    async def one() -> int:
        async with client.get("/api/image", params=THUMB, headers=headers) as resp:
            await resp.read()
            return resp.status

    statuses = await asyncio.gather(*(one() for _ in range(1000)))
    assert statuses.count(200) == 500
    assert statuses.count(429) == 500
    quota = await (await client.get("/api/rate_limit", headers=headers)).json()
    assert quota["pools"]["images"]["used"] == 1000
    assert quota["pools"]["images"]["remaining"] == 0


async def test_exhausted_budget_is_429_with_consistent_retry_after(client: TestClient) -> None:
    await _consume(client, "ip:127.0.0.1", "images", 500, 500)
    resp = await client.get("/api/image", params=THUMB)
    body = await resp.json()
    assert resp.status == 429
    assert body["error"] == "rate_limited"
    assert body["pool"] == "images"
    assert (body["used"], body["limit"]) == (500, 500)
    assert int(resp.headers["Retry-After"]) == body["retry_after_seconds"] > 0
    assert [step["action"] for step in body["next_steps"]][:2] == ["sign_in", "get_free_key"]
    assert resp.headers["Access-Control-Allow-Origin"] == "*"


async def test_head_spends_nothing_and_answers_as_get_would(client: TestClient) -> None:
    await _consume(client, "ip:127.0.0.1", "images", 499, 500)
    for _ in range(3):
        assert (await client.head("/api/image", params=THUMB)).status == 200
    got = await client.get("/api/image", params=THUMB)  # the HEADs left the last unit for this GET
    assert got.status == 200
    head, get = await client.head("/api/image", params=THUMB), await client.get("/api/image", params=THUMB)
    assert head.status == get.status == 429
    assert abs(int(head.headers["Retry-After"]) - int(get.headers["Retry-After"])) <= 1  # asked a moment apart


async def test_iiif_responses_state_no_request_limit(client: TestClient) -> None:
    book = await (await client.get("/api/books/demo-speculum-fornacum")).json()
    for path in (f"/iiif/3/{book['id']}-1/info.json", f"/iiif/3/{book['id']}-1/full/max/0/default.jpg"):
        resp = await client.get(path)
        assert resp.status == 200
        # IIIF is charged to the image budget by area and counts no requests: never a misleading "requests";r=0
        assert '"requests"' not in resp.headers.get("RateLimit", "") + resp.headers.get("RateLimit-Policy", "")
        assert resp.headers["RateLimit-Policy"] == '"images";q=500;w=86400'  # info.json states the pool too
        assert resp.headers["RateLimit"].startswith('"images";r=')
    books = await client.get("/api/books")
    # t: until the first counted request ages out (3600 s, less the seconds this test has taken so far)
    assert re.fullmatch(r'.*"requests";r=58;t=3[56]\d\d', books.headers["RateLimit"]), books.headers["RateLimit"]


async def test_a_304_and_an_error_cost_nothing(client: TestClient) -> None:
    first = await client.get("/api/image", params=THUMB)
    etag = first.headers["ETag"]
    again = await client.get("/api/image", params=THUMB, headers={"If-None-Match": etag})
    assert again.status == 304
    missing = await client.get("/api/image", params={**THUMB, "page": "999"})
    assert missing.status == 404
    quota = await (await client.get("/api/rate_limit")).json()
    assert quota["pools"]["images"]["used"] == 1
    assert quota["pools"]["text"]["used"] == 0


async def test_rate_limit_endpoint_counts_nothing(client: TestClient) -> None:
    for _ in range(70):
        resp = await client.get("/api/rate_limit")
        assert resp.status == 200
    body = await resp.json()
    assert body["caller"]["class"] == "anonymous"
    assert body["pools"]["images"] == {
        "limit": 500,
        "used": 0,
        "remaining": 500,
        "window_seconds": 86400,
        "reset_seconds": 0,
        "used_exact": 0,
    }


async def test_anonymous_request_limit_is_60_an_hour(client: TestClient) -> None:
    statuses = [(await client.get("/api/books")).status for _ in range(61)]
    assert statuses[:60] == [200] * 60
    assert statuses[60] == 429
    resp = await client.get("/api/books")
    body = await resp.json()
    assert body["pool"] == "requests"
    assert body["limit"] == 60
    assert 3590 <= int(resp.headers["Retry-After"]) <= 3600


async def test_unknown_revoked_and_expired_keys_are_401_never_anonymous(client: TestClient, data_dir: Path) -> None:
    from datetime import UTC, datetime, timedelta

    revoked, revoked_id = _key(data_dir, "full")
    expired, _ = _key(data_dir, "full", expires_at=datetime.now(UTC) - timedelta(seconds=1))
    catalog = Catalog(data_dir / "catalog.sqlite3")
    revoke_key(catalog, revoked_id)
    catalog.close()
    for key, word in (("isk_00000000_" + "A" * 43, "not known"), (revoked, "revoked"), (expired, "expired")):
        resp = await client.get("/api/image", params=THUMB, headers=_auth(key))
        body = await resp.json()
        assert resp.status == 401, key
        assert body["error"] == "unauthorized"
        assert word in body["message"]
    resp = await client.get("/api/books", headers={"Authorization": "Basic dXNlcjpwYXNz"})
    assert resp.status == 401


async def test_session_tokens(client: TestClient) -> None:
    good = sign_session("u7", int(time.time()) + 60, "test-secret")
    resp = await client.get("/api/rate_limit", headers=_auth(good))
    assert (await resp.json())["caller"]["class"] == "signed_in"
    for token in (
        sign_session("u7", int(time.time()) + 60, "other-secret"),
        sign_session("u7", int(time.time()) - 1, "test-secret"),
        "sess.v1.garbage",
    ):
        resp = await client.get("/api/books", headers=_auth(token))
        assert resp.status == 401
    resp = await client.get("/api/rate_limit", cookies={"imagesvc_session": good})
    assert (await resp.json())["caller"]["class"] == "signed_in"


async def test_keys_get_their_class(client: TestClient, data_dir: Path) -> None:
    free, _ = _key(data_dir, "free")
    enterprise, _ = _key(data_dir, "enterprise")
    resp = await client.get("/api/image", params=THUMB, headers=_auth(free))
    assert resp.headers["RateLimit-Policy"] == '"images";q=2000;w=86400, "requests";q=60;w=60'
    resp = await client.get("/api/image", params=THUMB, headers=_auth(enterprise))
    assert resp.status == 200
    assert resp.headers["RateLimit-Policy"] == '"requests";q=1000;w=60'  # images uncapped: no quota to state
    usage = await (await client.get("/api/dataset/v1/usage", headers=_auth(enterprise))).json()
    images = [row for row in usage["usage"] if row["pool"] == "images"]
    assert images and images[-1]["units"] == 1


async def test_usage_meter_needs_a_key(client: TestClient) -> None:
    resp = await client.get("/api/dataset/v1/usage")
    assert resp.status == 401
    assert (await resp.json())["error"] == "unauthorized"


class FakeResolver:
    """DNS answers for crawler verification, passed through build_app's constructor argument."""

    def __init__(self, ptr: dict[str, list[str]], a: dict[str, list[str]]) -> None:
        self.ptr, self.a = ptr, a
        self.lookups = 0

    async def reverse(self, address: str) -> list[str]:
        self.lookups += 1
        return self.ptr.get(address, [])

    async def forward(self, hostname: str) -> list[str]:
        return self.a.get(hostname, [])


async def test_verified_crawler_is_never_limited_but_a_spoofed_one_is(aiohttp_client: Any, data_dir: Path) -> None:
    from imagesvc.app import build_app
    from tests.library import settings_for

    resolver = FakeResolver(
        ptr={"66.249.66.1": ["crawl-66-249-66-1.googlebot.com"], "203.0.113.9": ["crawl.googlebot.com.evil.example"]},
        a={"crawl-66-249-66-1.googlebot.com": ["66.249.66.1"], "crawl.googlebot.com.evil.example": ["203.0.113.9"]},
    )
    settings = settings_for(data_dir, trusted_proxies=("127.0.0.1",))
    client = await aiohttp_client(build_app(settings, resolver=resolver))
    bot = {"User-Agent": "Mozilla/5.0 (compatible; Googlebot/2.1)", "X-Forwarded-For": "66.249.66.1"}
    for _ in range(70):
        resp = await client.get("/api/books", headers=bot)
        assert resp.status == 200
        assert "RateLimit" not in resp.headers
    assert resolver.lookups == 1  # cached
    spoof = {"User-Agent": "Googlebot/2.1", "X-Forwarded-For": "203.0.113.9"}
    statuses = [(await client.get("/api/books", headers=spoof)).status for _ in range(61)]
    assert statuses[-1] == 429


async def test_shutdown_ends_the_dns_look_ups_still_pending(aiohttp_client: Any, data_dir: Path) -> None:
    """A crawler check waiting on a silent name server does not outlive the service: closing the app cancels it at
    once (a look-up left in c-ares would fire on a closed loop at its timeout)."""
    from imagesvc.access.identity import SystemResolver
    from imagesvc.app import build_app
    from tests.library import settings_for

    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))
    silent.setblocking(False)
    try:
        resolver = SystemResolver(timeout=10.0, nameservers=[f"127.0.0.1:{silent.getsockname()[1]}"])
        client = await aiohttp_client(build_app(settings_for(data_dir), resolver=resolver))
        pending = asyncio.ensure_future(resolver.reverse("66.249.66.1"))
        loop = asyncio.get_running_loop()
        assert await asyncio.wait_for(loop.sock_recv(silent, 512), 5.0)  # the query went out and is waiting
        started = time.monotonic()
        await client.close()
        assert await asyncio.wait_for(pending, 2.0) == []
        assert time.monotonic() - started < 2.0
    finally:
        silent.close()


async def test_assistant_fetch_exempt_only_from_configured_networks(aiohttp_client: Any, data_dir: Path) -> None:
    from imagesvc.app import build_app
    from tests.library import settings_for

    settings = settings_for(data_dir, trusted_proxies=("127.0.0.1",), assistant_networks=("192.0.2.0/24",))
    client = await aiohttp_client(build_app(settings))
    inside = {"User-Agent": "Mozilla/5.0 Claude-User/1.0", "X-Forwarded-For": "192.0.2.10"}
    outside = {"User-Agent": "Mozilla/5.0 Claude-User/1.0", "X-Forwarded-For": "198.51.100.10"}
    assert all([(await client.get("/api/books", headers=inside)).status == 200 for _ in range(65)])
    statuses = [(await client.get("/api/books", headers=outside)).status for _ in range(61)]
    assert statuses[-1] == 429


async def test_forwarded_for_is_ignored_from_untrusted_peers(client: TestClient) -> None:
    """Without trusted proxies, rotating X-Forwarded-For does not buy a fresh allowance."""
    statuses = [
        (await client.get("/api/books", headers={"X-Forwarded-For": f"198.51.100.{i}"})).status for i in range(61)
    ]
    assert statuses[-1] == 429


async def test_a_download_cut_off_mid_body_is_refunded(client: TestClient) -> None:
    """Delivered means the whole body was handed to the transport: a client that reads the headers and a little of
    a large image, then hangs up, is charged nothing; one that reads it all is charged its price.

    The body must be larger than the kernel's socket buffers (up to 4 MiB here) or it is all handed over at once,
    before the client can hang up: a full-size PNG of the 4200 px page is tens of megabytes."""
    book = await (await client.get("/api/books/demo-traite-des-mines")).json()
    path = f"/iiif/3/{book['id']}-2/full/max/0/default.png"
    request = f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()

    def cut_off(reset: bool) -> bytes:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a slow reader: the server's buffer fills
            sock.connect((client.host, client.port))
            sock.sendall(request)
            sock.settimeout(60)
            head = sock.recv(4096)
            time.sleep(0.5)  # the server is now waiting for this client to read
            if reset:  # hang up with a reset; otherwise an orderly close
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return head

    for reset in (True, False):
        head = await asyncio.to_thread(cut_off, reset)
        assert head.startswith(b"HTTP/1.1 200") and b"image/png" in head
        deadline = time.monotonic() + 60  # the server notices on its next write; the bound only catches a refund
        while time.monotonic() < deadline:  # that never comes, however slow the machine
            pool = (await (await client.get("/api/rate_limit")).json())["pools"]["images"]
            if pool["used_exact"] == 0:
                break
            await asyncio.sleep(0.1)
        assert pool["used_exact"] == 0, reset
    whole = await client.get(path)
    assert whole.status == 200 and len(await whole.read()) == int(whole.headers["Content-Length"]) > 6_000_000
    w, h = book_size = Image.open(io.BytesIO(await (await client.get(path)).read())).size
    assert book_size and w * h > 4_000_000
    pool = (await (await client.get("/api/rate_limit")).json())["pools"]["images"]
    assert pool["used_exact"] == 2 * -(-w * h * 1000 // 4_000_000) / 1000  # both whole downloads, exactly
