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
