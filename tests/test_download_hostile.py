"""``imagesvc download`` against a hostile server: a tar member named to climb out of the bag, or a listing whose
slug does, is refused with a clear failure and nothing is written outside ``--dest``."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import tarfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.test_download import _download


def _tar(name: str, data: bytes) -> bytes:
    """A pax TAR of one member as the archive route frames it: its SHA-256 in a pax record, so it verifies."""
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.pax_headers = {"IMAGESVC.sha256": hashlib.sha256(data).hexdigest()}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.fixture
async def hostile() -> AsyncIterator[Callable[[str, str], asyncio.Future[str]]]:
    """``await hostile(slug, member)``: the URL of a server listing one page of ``slug`` and answering every
    archive request with a TAR holding one member named ``member``."""
    servers: list[TestServer] = []

    async def start(slug: str, member: str) -> str:
        async def answer(request: web.Request) -> web.Response:
            if request.path.endswith("/archive"):
                return web.Response(body=_tar(member, b"#!/bin/sh\necho pwned\n"), content_type="application/x-tar")
            if "/dataset/" in request.path and request.path.endswith("/images"):  # the listing, whatever version
                return web.json_response({"items": [{"slug": slug, "page": 1}], "next_cursor": None})
            raise web.HTTPNotFound()

        app = web.Application()
        app.router.add_get("/{tail:.*}", answer)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return str(server.make_url("/api"))

    yield start  # type: ignore[misc]
    for server in servers:
        await server.close()


def _written(root: Path, dest: Path) -> list[Path]:
    """Files under ``root`` outside ``dest``."""
    return [p for p in root.rglob("*") if p.is_file() and not p.is_relative_to(dest)]


@pytest.mark.parametrize(
    ("slug", "member", "reason"),
    [
        ("good-book", "x/data/../../../outside/good-book-p1-full.jpg", "not a plain file name"),
        ("good-book", "/tmp/x/data/good-book-p1-full.jpg", "not a plain file name"),
        ("good-book", "x/data/..\\..\\..\\outside\\good-book-p1-full.jpg", "not a plain file name"),
        ("../../outside", "x/data/outside-p1-full.jpg", "not a slug"),
    ],
)
async def test_names_from_a_hostile_server_never_write_outside_the_bag(
    hostile: Callable[[str, str], asyncio.Future[str]], tmp_path: Path, slug: str, member: str, reason: str
) -> None:
    url = await hostile(slug, member)
    root = tmp_path / "work"
    dest = root / "sub" / "bag"
    proc = await _download("--all", "--dest", str(dest), "--url", url, "--key", "k", "--json", "--concurrency", "1")
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert _written(root, dest) == []  # nothing outside --dest, in any folder above it
    assert proc.returncode == 1, err.decode()
    summary = json.loads(out)
    assert summary["images"] == 0 and any(reason in failure for failure in summary["failures"]), summary
    assert "failed: " in err.decode() and reason in err.decode()


# ---------------------------------------------------------------------------------------------------------------------
# A server that answers as the test says: redirects, endless or looping listings, members no archive route sends.


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Any], asyncio.Future[str]]]:
    """``await serve(handler)``: the REST base URL of a server answering every GET with ``handler``."""
    servers: list[TestServer] = []

    async def start(handler: Any) -> str:
        app = web.Application()
        app.router.add_get("/{tail:.*}", handler)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return str(server.make_url("/api"))

    yield start  # type: ignore[misc]
    for server in servers:
        await server.close()


LISTING = {"items": [{"slug": "good-book", "page": 1}], "next_cursor": None}
MEMBER = "good-book-full/data/good-book-p1-full.jpg"


async def _run(url: str, dest: Path, *extra: str, timeout: float = 60) -> tuple[int | None, dict, str]:
    """Run the download against ``url``; a run still going after ``timeout`` s is killed (its code is None)."""
    proc = await _download("--all", "--dest", str(dest), "--url", url, "--key", "secret-key", "--json",
                           "--concurrency", "1", "--retries", "1", "--max-wait", "1", *extra)  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout=timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return None, {}, "still running: killed"
    try:
        summary = json.loads(out)
    except ValueError:
        summary = {}
    return proc.returncode, summary, err.decode()


async def test_the_key_never_follows_a_redirect_to_another_origin(
    serve: Callable[[Any], asyncio.Future[str]], tmp_path: Path
) -> None:
    seen: list[str | None] = []

    async def elsewhere(request: web.Request) -> web.StreamResponse:
        seen.append(request.headers.get("Authorization"))
        if request.path.endswith("/archive"):
            return web.Response(body=_tar(MEMBER, b"jpeg"), content_type="application/x-tar")
        return web.json_response(LISTING)

    other = await serve(elsewhere)

    async def redirecting(request: web.Request) -> web.StreamResponse:
        if request.path.endswith("/archive"):  # the listing is honest; the archive is sent elsewhere
            raise web.HTTPFound(other.removesuffix("/api") + request.path_qs)
        return web.json_response(LISTING) if "/changes" not in request.path else web.json_response({"totalItems": 0})

    code, summary, err = await _run(await serve(redirecting), tmp_path / "bag")
    assert seen == [], "the key went to the origin a redirect named"
    assert code == 1, err
    assert any("another origin" in f for f in summary["failures"]), summary


def _sparse_gnu() -> bytes:
    info = tarfile.TarInfo(MEMBER)
    info.type = tarfile.GNUTYPE_SPARSE
    info.size = 4
    return info.tobuf(tarfile.GNU_FORMAT) + b"jpeg".ljust(512, b"\0") + bytes(1024)


def _sparse_pax() -> bytes:
    info = tarfile.TarInfo(MEMBER)
    info.size = 4
    info.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.realsize": str(1 << 20),
                        "IMAGESVC.sha256": hashlib.sha256(b"jpeg").hexdigest()}  # fmt: skip
    return info.tobuf(tarfile.PAX_FORMAT) + b"jpeg".ljust(512, b"\0") + bytes(1024)


def _huge() -> bytes:
    """A member declaring 64 GiB, of which a few bytes come before the stream ends."""
    info = tarfile.TarInfo(MEMBER)
    info.size = 64 << 30
    info.pax_headers = {"IMAGESVC.sha256": "0" * 64}
    return info.tobuf(tarfile.PAX_FORMAT) + b"x" * 4096


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        pytest.param(_sparse_gnu, "sparse", id="gnu-sparse"),
        pytest.param(_sparse_pax, "sparse", id="pax-sparse"),
        pytest.param(_huge, "more than --max-member", id="64-GiB-member"),
        pytest.param(lambda: _tar("good-book-full/RESUME.txt", b"nothing like it\n"), "unknown shape", id="resume"),
        pytest.param(lambda: _tar("good-book-full/RESUME.txt", b""), "unknown shape", id="empty-resume"),
    ],
)
async def test_members_no_archive_route_sends_are_refused_without_a_traceback(
    serve: Callable[[Any], asyncio.Future[str]], tmp_path: Path, body: Callable[[], bytes], reason: str
) -> None:
    async def answer(request: web.Request) -> web.StreamResponse:
        if request.path.endswith("/archive"):
            return web.Response(body=body(), content_type="application/x-tar")
        return web.json_response(LISTING) if "/changes" not in request.path else web.json_response({"totalItems": 0})

    dest = tmp_path / "bag"
    code, summary, err = await _run(await serve(answer), dest)
    assert code == 1 and "Traceback" not in err, err
    assert any(reason in f for f in summary["failures"]), summary
    assert summary["images"] == 0 and not list((dest / "data").rglob("*.jpg")) if (dest / "data").exists() else True


async def test_an_endless_listing_is_cut_at_the_answer_bound(
    serve: Callable[[Any], asyncio.Future[str]], tmp_path: Path
) -> None:
    async def endless(request: web.Request) -> web.StreamResponse:
        if "/changes" in request.path:
            return web.json_response({"totalItems": 0})
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"items": [')
        item = json.dumps({"slug": "good-book", "page": 1}).encode() + b","
        for _ in range(160):  # 0.6 MB a round, until the client hangs up (or 100 MB)
            try:
                await response.write(item * 20_000)
            except (ConnectionError, RuntimeError):
                break
        return response

    code, summary, err = await _run(await serve(endless), tmp_path / "bag", "--max-json", "4000000")
    assert code == 1 and "Traceback" not in err, err
    assert any("larger than 4000000 bytes" in f for f in summary["failures"]), summary


async def test_a_listing_cursor_that_repeats_ends_the_run_with_an_error(
    serve: Callable[[Any], asyncio.Future[str]], tmp_path: Path
) -> None:
    asked: list[str] = []

    async def looping(request: web.Request) -> web.StreamResponse:
        if "/changes" in request.path:
            return web.json_response({"totalItems": 0})
        asked.append(request.query.get("cursor", ""))
        return web.json_response({"items": [{"slug": "good-book", "page": 1}], "next_cursor": "again"})

    code, summary, err = await _run(await serve(looping), tmp_path / "bag")
    assert code == 1, err
    assert any("next_cursor repeats" in f for f in summary["failures"]), summary
    assert len(asked) == 2  # the first page, and the one its cursor named: not a third
