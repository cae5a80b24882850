"""Metered deliveries under clients that stop reading: what is charged is what the client received (its TCP
acknowledged every byte), reservations live as long as the delivery, a stalled reader is cut off at the write
deadline, archives are capped per key and per node, and a key revoked mid-archive ends it with RESUME.txt.

The attacker is a raw socket with a small receive buffer, run in a thread (the server runs on the test's loop): it
reads the response head and then stops reading, or stalls, or hangs up.
"""

from __future__ import annotations

import asyncio
import io
import select
import socket
import struct
import tarfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer

from imagesvc.access import MILLI
from imagesvc.app import build_app
from imagesvc.catalog import Catalog
from imagesvc.catalog.api_keys import revoke_key
from imagesvc.web.app_keys import ACCESS
from tests.http.keys import new_key
from tests.library import settings_for

SPECULUM = "demo-speculum-fornacum"  # 8 pages, about 600 KB each at the full tier
RECEIVE_BUFFER = 4096  # the attacker's SO_RCVBUF: its TCP takes a few kilobytes before it stops acknowledging
HANG = 60  # seconds: a bound only a hang exceeds

Start = Callable[..., Awaitable[TestServer]]


@pytest.fixture
async def start(data_dir: Path) -> AsyncIterator[Start]:
    """``await start(**setting_overrides)``: the real app on a loopback port."""
    servers: list[TestServer] = []

    async def make(**overrides: Any) -> TestServer:
        server = TestServer(build_app(settings_for(data_dir, **overrides)), host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return server

    yield make
    for server in servers:
        await server.close()


def _connect(server: TestServer, target: str, key: str, version: str = "1.1") -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
    sock.settimeout(HANG)
    sock.connect((server.host, server.port))
    request = f"GET {target} HTTP/{version}\r\nHost: localhost\r\nAuthorization: Bearer {key}\r\n\r\n"
    sock.sendall(request.encode())
    return sock


def _head(sock: socket.socket) -> tuple[bytes, bytes]:
    """The response head, and the body bytes read with it."""
    got = b""
    while b"\r\n\r\n" not in got:
        piece = sock.recv(1024)
        assert piece, got
        got += piece
    head, _, rest = got.partition(b"\r\n\r\n")
    return head, rest


def _closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    """Whether the server ended the connection within ``timeout`` seconds, without reading anything."""
    poll = select.poll()
    poll.register(sock, select.POLLRDHUP | select.POLLERR | select.POLLHUP)
    return bool(poll.poll(timeout * 1000))


def _read_to_end(sock: socket.socket, body: bytes) -> bytes:
    while piece := sock.recv(1 << 16):
        body += piece
    return body


def _hang_up(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


async def _charges(server: TestServer, key_id: str) -> tuple[float, float]:
    """(units counted against the key's image pool, pending included; units committed to its meter), once nothing
    is pending any more (the server settles a delivery when it ends)."""
    access, subject = server.app[ACCESS], f"key:{key_id}"
    deadline = time.monotonic() + HANG
    while True:
        used = (await access.usage(subject, "images", 2000 * MILLI)).used / MILLI
        metered = sum(r["units"] for r in await access.daily_usage(subject) if r["pool"] == "images") / MILLI
        if used == metered or time.monotonic() > deadline:
            return used, metered
        await asyncio.sleep(0.05)


async def _book_id(server: TestServer) -> str:
    async with _session(server) as http, http.get(f"/api/books/{SPECULUM}") as resp:
        return str((await resp.json())["id"])


def _session(server: TestServer) -> ClientSession:
    return ClientSession(base_url=f"http://{server.host}:{server.port}")


TARGETS = {
    "image": f"/api/image?book_id={SPECULUM}&page=2&tier=full",
    "zip-full": f"/api/books/{SPECULUM}/archive?tier=full",
    "tar-thumb": f"/api/books/{SPECULUM}/archive?tier=thumb&format=tar",
}


@pytest.mark.parametrize("door", [*TARGETS, "iiif"])
async def test_a_reader_that_stops_after_the_head_pays_for_nothing_and_is_cut_off(
    start: Start, data_dir: Path, door: str
) -> None:
    """A keyed client reads the response head and then nothing: the server, whose kernel would take megabytes,
    ends the connection at the write deadline and charges nothing, since no member reached the client whole (its
    receive buffer holds a few kilobytes: within the documented bound, no image fits)."""
    server = await start(write_timeout=1.0)
    key, key_id = new_key(data_dir, "free")
    target = TARGETS.get(door) or f"/iiif/3/{await _book_id(server)}-2/full/max/0/default.jpg"

    def stop_reading() -> tuple[bytes, bool]:
        sock = _connect(server, target, key)
        try:
            head, _ = _head(sock)
            return head, _closed_by_peer(sock, HANG)
        finally:
            _hang_up(sock)

    head, closed = await asyncio.to_thread(stop_reading)
    assert head.startswith(b"HTTP/1.1 200"), head
    assert closed, "the server kept a connection open that had not been read for a minute"
    assert await _charges(server, key_id) == (0, 0)


async def test_a_reader_that_trickles_is_cut_off_at_the_write_deadline(start: Start, data_dir: Path) -> None:
    """A keyed client reads an archive a few kilobytes at a time, never stalling long: acknowledging a little now
    and then must not hold the delivery (and its archive slot) for as long as the archive would take at that pace.
    Less than ``MIN_PROGRESS`` bytes a write deadline ends it, as a stall does, and the slot comes back."""
    from imagesvc.web.wire import MIN_PROGRESS

    server = await start(write_timeout=2.0, archive_per_key=1)
    key, _ = new_key(data_dir, "free")

    def trickle() -> tuple[bytes, float, int]:
        sock = _connect(server, TARGETS["zip-full"], key)
        started, read = time.monotonic(), 0
        try:
            head, rest = _head(sock)
            read = len(rest)
            while time.monotonic() - started < HANG:
                time.sleep(0.25)
                piece = sock.recv(1024)  # 4 KiB a second: a tenth of what a write deadline asks
                if not piece:
                    break
                read += len(piece)
        except OSError:  # reset by the server
            pass
        finally:
            _hang_up(sock)
        return head, time.monotonic() - started, read

    head, lasted, read = await asyncio.to_thread(trickle)
    assert head.startswith(b"HTTP/1.1 200"), head
    assert lasted < HANG, "a trickling reader kept its archive for a minute"
    assert read < 8 * MIN_PROGRESS, read
    deadline = time.monotonic() + HANG
    while True:  # the key's one archive slot is given back
        auth = {"Authorization": f"Bearer {key}"}
        async with _session(server) as http, http.get(TARGETS["tar-thumb"], headers=auth) as resp:
            await resp.read()
            if resp.status == 200:
                break
        assert time.monotonic() < deadline, resp.status
        await asyncio.sleep(0.2)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "redis"])
@pytest.mark.parametrize("door", ["image", "zip-full"])
async def test_a_delivery_read_after_stalls_longer_than_a_reservation_lives_is_charged_in_full(
    start: Start, data_dir: Path, door: str, backend: str, request: pytest.FixtureRequest
) -> None:
    """Reservations live 1 s here; the client stalls 2.5 s twice before reading everything. The delivery renews its
    reservations while it is written, on either access backend, so every image received is charged: one for
    /image, eight for the archive."""
    access = (
        {"access_backend": "redis", "redis_url": request.getfixturevalue("redis_server")} if backend == "redis" else {}
    )
    server = await start(reservation_ttl=1.0, write_timeout=HANG, archive_send_buffer=1 << 16, **access)
    key, key_id = new_key(data_dir, "free")

    def stall_and_read() -> bytes:
        sock = _connect(server, TARGETS[door], key, version="1.0")
        try:
            _, body = _head(sock)
            for _ in range(2):
                time.sleep(2.5)  # the stall is the attack: longer than a reservation lives, shorter than the deadline
                body += sock.recv(1 << 18)
            return _read_to_end(sock, body)
        finally:
            sock.close()

    body = await asyncio.to_thread(stall_and_read)
    expected = 1 if door == "image" else 8
    if door != "image":
        import zipfile

        with zipfile.ZipFile(io.BytesIO(body)) as archive:
            assert len([n for n in archive.namelist() if "/data/" in n]) == expected
    assert await _charges(server, key_id) == (expected, expected)


async def test_a_key_revoked_mid_archive_ends_it_with_resume(start: Start, data_dir: Path) -> None:
    """The client reads the head, the key is revoked, the client reads on: the archive holds the images already on
    their way and ends with RESUME.txt naming the revocation, instead of the rest of the book."""
    server = await start(archive_key_check=0.001, archive_send_buffer=1 << 16)
    key, key_id = new_key(data_dir, "full")

    def revoke_mid_stream() -> bytes:
        sock = _connect(server, TARGETS["zip-full"].replace("format=zip", "") + "&format=tar", key, version="1.0")
        try:
            _, body = _head(sock)
            catalog = Catalog(data_dir / "catalog.sqlite3")
            try:
                assert revoke_key(catalog, key_id)
            finally:
                catalog.close()
            return _read_to_end(sock, body)
        finally:
            sock.close()

    body = await asyncio.to_thread(revoke_mid_stream)
    with tarfile.open(fileobj=io.BytesIO(body), mode="r|") as archive:
        members = {m.name.split("/", 1)[1]: archive.extractfile(m).read() for m in archive}  # type: ignore[union-attr]
    images = [name for name in members if name.startswith("data/")]
    assert 1 <= len(images) <= 3, images  # those already made when the key was revoked; not the whole book (8)
    resume = members["RESUME.txt"].decode()
    assert "revoked" in resume and f"from={len(images) + 1}" in resume


async def test_a_key_has_at_most_its_archives_open_and_gets_a_slot_back_when_one_ends(
    start: Start, data_dir: Path
) -> None:
    server = await start(archive_per_key=2, archive_send_buffer=1 << 16)
    key, _ = new_key(data_dir, "enterprise")
    holders = [await asyncio.to_thread(_connect, server, TARGETS["zip-full"], key) for _ in range(2)]
    try:
        for sock in holders:
            head, _ = await asyncio.to_thread(_head, sock)
            assert head.startswith(b"HTTP/1.1 200")
        async with _session(server) as http:
            auth = {"Authorization": f"Bearer {key}"}
            async with http.get(TARGETS["tar-thumb"], headers=auth) as third:
                body = await third.json()
                assert third.status == 429 and body["error"] == "rate_limited" and body["limit"] == 2, body
                assert int(third.headers["Retry-After"]) > 0 and body["recovery"]
            _hang_up(holders.pop())
            deadline = time.monotonic() + HANG  # the slot comes back once the server sees the hang-up
            while True:
                async with http.get(TARGETS["tar-thumb"], headers=auth) as again:
                    if again.status == 200:
                        await again.read()
                        break
                    assert again.status == 429 and time.monotonic() < deadline
                await asyncio.sleep(0.05)
    finally:
        for sock in holders:
            _hang_up(sock)


async def test_a_node_sends_at_most_its_archives_at_once(start: Start, data_dir: Path) -> None:
    server = await start(archive_per_node=1, archive_send_buffer=1 << 16)
    first, _ = new_key(data_dir, "enterprise")
    second, _ = new_key(data_dir, "enterprise")
    holder = await asyncio.to_thread(_connect, server, TARGETS["zip-full"], first)
    try:
        head, _ = await asyncio.to_thread(_head, holder)
        assert head.startswith(b"HTTP/1.1 200")
        auth = {"Authorization": f"Bearer {second}"}
        async with _session(server) as http, http.get(TARGETS["tar-thumb"], headers=auth) as refused:
            body = await refused.json()
            assert refused.status == 503 and body["error"] == "unavailable", body
            assert int(refused.headers["Retry-After"]) > 0
            assert "127.0.0.1" not in body["message"] and socket.gethostname() not in body["message"]
    finally:
        _hang_up(holder)


async def test_two_nodes_on_one_host_keep_a_count_each(start: Start, data_dir: Path) -> None:
    """Two nodes on one machine, sharing the access store: an archive held open on one takes none of the other's
    slots (they were counted under the host's name alone, so a node sending nothing refused with 503)."""
    busy = await start(archive_per_node=1, archive_send_buffer=1 << 16)
    idle = await start(archive_per_node=1, archive_send_buffer=1 << 16)
    first, _ = new_key(data_dir, "enterprise")
    second, _ = new_key(data_dir, "enterprise")
    holder = await asyncio.to_thread(_connect, busy, TARGETS["zip-full"], first)
    try:
        head, _ = await asyncio.to_thread(_head, holder)
        assert head.startswith(b"HTTP/1.1 200")
        auth = {"Authorization": f"Bearer {second}"}
        async with _session(idle) as http, http.get(TARGETS["tar-thumb"], headers=auth) as served:
            assert served.status == 200, await served.text()
            await served.read()
        async with _session(busy) as http, http.get(TARGETS["tar-thumb"], headers=auth) as refused:
            assert refused.status == 503, await refused.text()
    finally:
        _hang_up(holder)
