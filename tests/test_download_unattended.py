"""``imagesvc download`` left alone against the real app: streams cut by a proxy and 503s are retried from the page
they stopped at, a spent image budget ends the run at once, Ctrl-C stops after the member in hand (a second aborts),
and every run ends with a summary and an exit status that says which outcome."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import bagit
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from imagesvc.access import MILLI
from imagesvc.app import build_app
from imagesvc.web.app_keys import ACCESS
from tests.http.keys import new_key
from tests.library import copy_library, settings_for
from tests.test_download import _download, _journal

PASSED = ("Content-Type", "RateLimit", "RateLimit-Policy", "Retry-After")


@dataclass
class Live:
    server: TestServer
    url: str
    data: Path


@pytest.fixture(name="live")
async def live_fixture(demo_library: dict, tmp_path: Path) -> AsyncIterator[Live]:
    data = copy_library(demo_library["data"], tmp_path / "data")
    server = TestServer(build_app(settings_for(data)), host="127.0.0.1")
    await server.start_server()
    yield Live(server, str(server.make_url("/api")), data)
    await server.close()


@dataclass
class Faults:
    cut_after: int | None = None  # bytes of each archive stream passed on before the connection is cut
    unavailable: int = 0  # archive requests answered 503 (Retry-After: 1) before any reaches the app
    stall: asyncio.Event | None = None  # archive streams stop after their first bytes until this is set
    archives: int = 0


@pytest.fixture
async def proxy(live: Live) -> AsyncIterator[tuple[str, Faults]]:
    """A proxy in front of the app that breaks archive streams as ``Faults`` says (a restart, a cutting proxy)."""
    faults = Faults()
    session = aiohttp.ClientSession(auto_decompress=False)
    upstream = live.url.removesuffix("/api")

    async def forward(request: web.Request) -> web.StreamResponse:
        archive = request.path.endswith("/archive")
        if archive:
            faults.archives += 1
            if faults.unavailable > 0:
                faults.unavailable -= 1
                body = {"error": "unavailable", "message": "The node is restarting."}
                return web.json_response(body, status=503, headers={"Retry-After": "1"})
        headers = {"Authorization": request.headers.get("Authorization", "")}
        async with session.get(upstream + request.path_qs, headers=headers) as answer:
            response = web.StreamResponse(
                status=answer.status, headers={k: answer.headers[k] for k in PASSED if k in answer.headers}
            )
            await response.prepare(request)
            sent = 0
            async for chunk in answer.content.iter_chunked(1 << 14):
                if archive and faults.cut_after is not None and sent + len(chunk) > faults.cut_after:
                    await response.write(chunk[: faults.cut_after - sent])
                    assert request.transport is not None
                    request.transport.close()
                    return response
                if archive and faults.stall is not None and sent:
                    await faults.stall.wait()
                await response.write(chunk)
                sent += len(chunk)
            await response.write_eof()
            return response

    app = web.Application()
    app.router.add_get("/{tail:.*}", forward)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("/api")), faults
    await server.close()
    await session.close()


async def _finish(proc: asyncio.subprocess.Process, timeout: float = 240) -> tuple[int, dict, str]:
    """Exit status, JSON summary and stderr of a run; one still going after ``timeout`` s is killed (a failure)."""
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout=timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"still running after {timeout} s: killed") from None
    assert proc.returncode is not None
    return proc.returncode, json.loads(out) if out.strip() else {}, err.decode()


def _pages(dest: Path) -> list[str]:
    return [e["path"] for e in _journal(dest) if "path" in e and not e.get("removed")]


async def test_a_stream_cut_again_and_again_resumes_at_the_page_it_stopped_and_completes(
    live: Live, proxy: tuple[str, Faults], tmp_path: Path
) -> None:
    url, faults = proxy
    faults.cut_after = 60_000  # a proxy cutting every archive stream: a few thumbnails get through each time
    key, _ = new_key(live.data, "full")
    dest, log = tmp_path / "bag", tmp_path / "run.log"
    proc = await _download("--all", "--dest", str(dest), "--url", url, "--key", key, "--tier", "thumb", "--json",
                           "--retries", "2", "--max-wait", "0.2", "--log", str(log))  # fmt: skip
    code, summary, err = await _finish(proc)
    assert code == 0, err
    assert "Traceback" not in err and "retry" in err
    assert summary["outcome"] == "complete" and summary["valid"] and summary["retries"] >= 3, summary
    assert summary["fetched"] == summary["images"] == summary["expected"] == 27
    assert summary["units_billed"] == 27  # each image received whole once: what the server commits
    paths = _pages(dest)
    assert len(paths) == len(set(paths)) == 27  # no page fetched twice
    assert faults.archives > 4  # one request per cut: each resumed at the page the cut one stopped at
    bagit.Bag(str(dest)).validate()
    assert json.loads(log.read_text().splitlines()[-1])["outcome"] == "complete"


async def test_a_503_with_retry_after_is_retried_and_said_on_screen(
    live: Live, proxy: tuple[str, Faults], tmp_path: Path
) -> None:
    url, faults = proxy
    faults.unavailable = 2
    key, _ = new_key(live.data, "full")
    proc = await _download("demo-speculum-fornacum", "--dest", str(tmp_path / "bag"), "--url", url, "--key", key,
                           "--tier", "thumb", "--json")  # fmt: skip
    code, summary, err = await _finish(proc)
    assert code == 0, err
    assert "Retry-After 1 s" in err and summary["retries"] == 2 and summary["fetched"] == 8, summary


async def test_a_spent_image_budget_ends_the_run_at_once_saying_what_is_left_and_when(
    live: Live, tmp_path: Path
) -> None:
    key, key_id = new_key(live.data, "free")
    held = await live.server.app[ACCESS].reserve(f"key:{key_id}", "images", 1997 * MILLI, 2000 * MILLI)
    assert await live.server.app[ACCESS].commit(held)  # 3 images left today
    proc = await _download("--all", "--dest", str(tmp_path / "bag"), "--url", live.url, "--key", key,
                           "--tier", "thumb", "--json", "--pages", "4", "--concurrency", "1")  # fmt: skip
    code, summary, err = await _finish(proc, timeout=50)  # the old client waited 60 s a round, for ever
    assert code == 3, err
    assert summary["outcome"] == "budget_spent" and summary["fetched"] == summary["units_billed"] == 3, summary
    assert summary["left"] == 24 and summary["resume_after_seconds"] > 0 and summary["resume_at"]
    assert summary["valid"]  # what it has is a valid bag


async def test_ctrl_c_finishes_the_member_in_hand_records_it_and_exits(live: Live, tmp_path: Path) -> None:
    key, _ = new_key(live.data, "full")
    dest = tmp_path / "bag"
    args = ("--all", "--dest", str(dest), "--url", live.url, "--key", key, "--pages", "1", "--concurrency", "1",
            "--json")  # fmt: skip
    proc = await _download(*args)
    for _ in range(6000):
        if len(_pages(dest)) >= 2 or proc.returncode is not None:
            break
        await asyncio.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    code, summary, err = await _finish(proc, timeout=60)
    assert code == 4, err
    assert summary["outcome"] == "interrupted" and 2 <= summary["fetched"] < 27 and summary["valid"], summary
    assert not list(dest.rglob("*.part"))
    again = await _download(*args)
    code, summary, err = await _finish(again)
    assert code == 0 and summary["fetched"] + summary["skipped"] == 27, err
    assert len(set(_pages(dest))) == len(_pages(dest)) == 27


async def test_a_second_ctrl_c_aborts_a_run_waiting_on_a_stalled_stream(
    live: Live, proxy: tuple[str, Faults], tmp_path: Path
) -> None:
    url, faults = proxy
    faults.stall = asyncio.Event()
    key, _ = new_key(live.data, "full")
    proc = await _download("--all", "--dest", str(tmp_path / "bag"), "--url", url, "--key", key, "--json")
    for _ in range(6000):
        if faults.archives or proc.returncode is not None:
            break
        await asyncio.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    assert proc.stderr is not None
    heard = b""
    try:
        while b"Ctrl-C" not in heard:  # the first was handled (two at once would arrive as one signal)
            heard += await asyncio.wait_for(proc.stderr.readline(), timeout=30)
        proc.send_signal(signal.SIGINT)
        code, _, err = await _finish(proc, timeout=30)
    finally:
        faults.stall.set()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert code == 130, err
    assert "aborted" in err
