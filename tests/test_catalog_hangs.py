"""A hung, locked, restarted or absent PostgreSQL catalog never stops a node: catalog routes answer 503
``unavailable`` within the catalog deadline (``IMAGESVC_CATALOG_DEADLINE``, 1.5 s by default), liveness and the
public tiers under ``/img/`` keep answering at once, and the catalog routes answer 200 again within 2 s of the
server answering, without a restart. The app is the real one, in process, over a real PostgreSQL server that the
tests stop with SIGSTOP (every server process), lock from another session, restart, or shut down.

A safety net resumes the server after a bound only a frozen event loop reaches (``SAFETY``): where the loop blocks on
the catalog, the requests below answer only then, and the timing assertions fail rather than hang the suite.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
import pytest
from aiohttp.test_utils import TestClient

from imagesvc.app import build_app
from imagesvc.catalog.api_keys import create_key
from imagesvc.catalog.postgres import PostgresCatalog
from imagesvc.settings import Settings
from imagesvc.web.app_keys import SERVICES
from tests.library import settings_for
from tests.servers import PostgresServer, create_database, descendants, start_serve, stop_process
from tests.test_ingest_kills import IMAGESVC, ingest_env

pytestmark = pytest.mark.slow

DEADLINE = 1.5  # the default catalog deadline
SLACK = 1.5  # a loaded test machine's scheduling, on top of the deadline
FAST = 1.0  # liveness and /img/ answer well within this while the catalog hangs (they need no catalog)
RESUMED = 2.0  # catalog routes answer 200 within this of the server answering again
HELD = 4.0  # how long a test keeps the server hung or locked (past the deadline)
SAFETY = 10.0  # the server is resumed after this whatever happens
STATEMENT_TIMEOUT = 5.0  # the serving catalog's statement_timeout (catalog/backends.py): a live server ends a wait
IMG = "pub/demo/page-1.jpg"


def _settings(tmp_path: Path, url: str, **overrides: Any) -> Settings:
    data = tmp_path / "data"
    picture = data / "store" / IMG
    picture.parent.mkdir(parents=True, exist_ok=True)
    picture.write_bytes(b"\xff\xd8\xff\xe0" + secrets.token_bytes(4000) + b"\xff\xd9")
    return settings_for(data, catalog="postgres", database_url=url, **overrides)  # type: ignore[no-any-return]


def _server_pids(server: PostgresServer) -> list[int]:
    postmaster = int((server.datadir / "postmaster.pid").read_text().split()[0])
    return [postmaster, *sorted(descendants(postmaster))]


@contextmanager
def hung(server: PostgresServer) -> Iterator[None]:
    """Every process of ``server`` stopped (SIGSTOP) until the block ends, or ``SAFETY`` seconds at most."""
    postmaster = _server_pids(server)[0]
    os.kill(postmaster, signal.SIGSTOP)  # first: it forks no new backend while the others are stopped
    stopped = [postmaster, *sorted(descendants(postmaster))]
    for pid in stopped[1:]:
        os.kill(pid, signal.SIGSTOP)

    def resume() -> None:
        for pid in stopped:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    net = threading.Timer(SAFETY, resume)
    net.start()
    try:
        yield
    finally:
        net.cancel()
        resume()


@contextmanager
def locked(url: str) -> Iterator[None]:
    """``books`` held in ACCESS EXCLUSIVE mode by another session until the block ends (``SAFETY`` s at most)."""
    holder = psycopg.connect(url)
    holder.execute("LOCK TABLE books IN ACCESS EXCLUSIVE MODE")
    net = threading.Timer(SAFETY, holder.rollback)
    net.start()
    try:
        yield
    finally:
        net.cancel()
        holder.rollback()
        holder.close()


async def _timed(client: TestClient, path: str, **kwargs: Any) -> tuple[int, float, Any]:
    started = time.monotonic()
    async with client.get(path, **kwargs) as resp:
        body = await resp.json() if resp.content_type == "application/json" else await resp.read()
        return resp.status, time.monotonic() - started, body


async def _uncatalogued_while(client: TestClient, busy: asyncio.Future[Any], at_least: float) -> dict[str, list[float]]:
    """Seconds each ``/img/``, ``/health/live`` and ``/metrics`` request took, asked one after another while
    ``busy`` runs and for ``at_least`` seconds; every one answered 200."""
    took: dict[str, list[float]] = {f"/img/{IMG[4:]}": [], "/health/live": [], "/metrics": []}
    until = time.monotonic() + at_least
    while not busy.done() or time.monotonic() < until:
        for path, seconds in took.items():
            status, elapsed, _ = await _timed(client, path)
            assert elapsed < FAST, (path, elapsed)  # a loop waiting on the catalog answers only when it does
            assert status == 200, (path, status)
            seconds.append(elapsed)
    return took


def _report(what: str, took: dict[str, list[float]]) -> None:
    for path, seconds in took.items():
        ordered = sorted(seconds)
        p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
        print(f"{what}: {path} n={len(ordered)} p50={statistics.median(ordered) * 1000:.1f} ms p99={p99 * 1000:.1f} ms")


async def _until_200(client: TestClient, path: str, since: float, bound: float) -> float:
    while (status := (await _timed(client, path))[0]) != 200:
        assert time.monotonic() - since < bound, (path, status)
        await asyncio.sleep(0.02)
    return time.monotonic() - since


async def _catalog_routes_refuse_in_time(client: TestClient, key: str) -> None:
    """A few concurrent requests on catalog routes (one keyed: the key is looked up in the catalog) each answer 503
    ``unavailable`` within the deadline; asked again, at once."""
    paths = ["/api/books", "/api/books/no-such-book", "/api/books?limit=3"]
    calls = [_timed(client, p) for p in paths for _ in range(3)]
    calls.append(_timed(client, "/api/rate_limit", headers={"Authorization": f"Bearer {key}"}))
    for status, elapsed, body in await asyncio.gather(*calls):
        assert status == 503 and body["error"] == "unavailable", (status, body)
        assert elapsed < DEADLINE + SLACK, elapsed
        assert "127.0.0.1" not in body["message"], body
    for path in paths:  # the catalog is known to hang now: no request waits for it again
        status, elapsed, body = await _timed(client, path)
        assert status == 503 and elapsed < FAST, (path, status, elapsed)


@pytest.fixture
def url(postgres_server: PostgresServer) -> str:
    return create_database(postgres_server, f"hang_{secrets.token_hex(5)}")


@pytest.fixture
def key(url: str) -> str:
    catalog = PostgresCatalog(url)
    try:
        return create_key(catalog, "full")[0]
    finally:
        catalog.close()


async def test_a_hung_server_costs_catalog_routes_a_503_in_time_and_nothing_else(
    aiohttp_client: Any, postgres_server: PostgresServer, url: str, key: str, tmp_path: Path
) -> None:
    client = await aiohttp_client(build_app(_settings(tmp_path, url)))
    assert (await _timed(client, "/api/books"))[0] == 200
    with hung(postgres_server):
        refusals = asyncio.ensure_future(_catalog_routes_refuse_in_time(client, key))
        took = await _uncatalogued_while(client, refusals, at_least=HELD - 1)
        await refusals
        status, elapsed, body = await _timed(client, "/health/ready")
        assert status == 503 and body["down"] == ["catalog"] and elapsed < DEADLINE + SLACK, (status, body)
        status, elapsed, _ = await _timed(client, "/health")  # the full report: a fast 503, never a hang
        assert status == 503 and elapsed < DEADLINE + SLACK, (status, elapsed)
        resumed = time.monotonic()
    _report("server hung (SIGSTOP)", took)
    back = await _until_200(client, "/api/books", resumed, RESUMED)
    print(f"catalog routes 200 again {back * 1000:.0f} ms after SIGCONT")
    assert (await _timed(client, "/api/rate_limit", headers={"Authorization": f"Bearer {key}"}))[0] == 200
    assert (await _timed(client, "/health/ready"))[0] == 200


async def test_a_lock_held_in_another_session_costs_a_503_in_time_and_nothing_else(
    aiohttp_client: Any, url: str, key: str, tmp_path: Path
) -> None:
    client = await aiohttp_client(build_app(_settings(tmp_path, url)))
    assert (await _timed(client, "/api/books"))[0] == 200
    with locked(url):
        paths = ["/api/books", "/api/books/no-such-book"]
        calls: asyncio.Future[list[Any]] = asyncio.gather(*(_timed(client, p) for p in paths for _ in range(3)))
        took = await _uncatalogued_while(client, calls, at_least=HELD - 1)
        for status, elapsed, body in await calls:
            assert status == 503 and body["error"] == "unavailable" and elapsed < DEADLINE + SLACK, (status, body)
        released = time.monotonic()
    _report("books locked", took)
    await _until_200(client, "/api/books", released, RESUMED)


async def test_the_first_request_after_a_quiet_restart_succeeds(
    aiohttp_client: Any, postgres_server: PostgresServer, url: str, tmp_path: Path
) -> None:
    """A restart leaves every pooled connection dead; the pool checks one before handing it out, so the first
    request after the restart is served (not "connection was lost") though the pool held several."""
    client = await aiohttp_client(build_app(_settings(tmp_path, url)))
    catalog = client.server.app[SERVICES].catalog
    threads = [threading.Thread(target=catalog.scalar, args=("SELECT pg_sleep(0.3)",)) for _ in range(4)]
    for thread in threads:  # four connections in the pool at once
        thread.start()
    for thread in threads:
        thread.join()
    postgres_server.stop("fast")
    postgres_server.start()
    status, _, body = await _timed(client, "/api/books")
    assert status == 200, body


@pytest.mark.parametrize("state", ["stopped", "hung"])
async def test_a_node_starts_without_its_database_and_serves_once_it_answers(
    aiohttp_client: Any, postgres_server: PostgresServer, url: str, tmp_path: Path, state: str
) -> None:
    settings = _settings(tmp_path, url)
    if state == "stopped":
        postgres_server.stop("fast")
        try:
            client = await aiohttp_client(build_app(settings))
            await _says_the_catalog_is_down(client, postgres_server.port)
        finally:
            postgres_server.start()
        back = time.monotonic()
    else:
        with hung(postgres_server):
            client = await aiohttp_client(build_app(settings))
            await _says_the_catalog_is_down(client, postgres_server.port)
            back = time.monotonic()
    await _until_200(client, "/api/books", back, 15.0)  # the stopped case: a fresh server's start and the probe
    assert (await _timed(client, "/health/ready"))[0] == 200


async def _says_the_catalog_is_down(client: TestClient, port: int) -> None:
    for _ in range(2):
        status, elapsed, body = await _timed(client, "/api/books")
        assert status == 503 and body["error"] == "unavailable" and elapsed < DEADLINE + SLACK, (status, body)
        assert "127.0.0.1" not in body["message"], body
    status, _, body = await _timed(client, "/health/ready")
    assert status == 503 and body["down"] == ["catalog"], body
    assert "127.0.0.1" not in str(body) and str(port) not in str(body), body
    assert (await _timed(client, "/health/live"))[0] == 200
    assert (await _timed(client, f"/img/{IMG[4:]}"))[0] == 200


async def test_imagesvc_serve_starts_and_keeps_its_workers_while_the_database_is_down(
    postgres_server: PostgresServer, url: str, tmp_path: Path
) -> None:
    """``imagesvc serve`` with two workers, started while PostgreSQL refuses connections: it stays up, alive and not
    ready, answers 503 on catalog routes, and serves once the server is back, with the same processes."""
    settings = _settings(tmp_path, url)
    env = ingest_env(settings.data_dir) | {
        "IMAGESVC_CATALOG": "postgres",
        "IMAGESVC_DATABASE_URL": url,
        "IMAGESVC_SERVE_WORKERS": "2",
        "IMAGESVC_TEXT_MODEL": "off",
    }
    postgres_server.stop("fast")
    proc, base = start_serve(env, tmp_path / "serve.log", command=[IMAGESVC, "serve"])
    try:
        async with aiohttp.ClientSession() as session:

            async def get(path: str) -> tuple[int, Any]:
                async with session.get(base + path) as resp:
                    return resp.status, await resp.json()

            deadline = time.monotonic() + 60  # a start on a loaded machine; a node that exits fails at once
            while True:
                assert proc.poll() is None, (tmp_path / "serve.log").read_text(errors="replace")[-3000:]
                try:
                    if (await get("/health/live"))[0] == 200:
                        break
                except aiohttp.ClientError:
                    pass
                assert time.monotonic() < deadline, "imagesvc serve did not answer /health/live"
                await asyncio.sleep(0.2)
            workers = descendants(proc.pid)
            status, body = await get("/health/ready")
            assert status == 503 and "catalog" in body["down"], body
            status, body = await get("/api/books")
            assert status == 503 and body["error"] == "unavailable", body
            postgres_server.start()
            back = time.monotonic()
            while (status := (await get("/api/books"))[0]) != 200:
                assert time.monotonic() - back < 30, status
                await asyncio.sleep(0.2)
            while (await get("/health/ready"))[0] != 200:  # the search warm-up finishes once the catalog answers
                assert time.monotonic() - back < 60, await get("/health/ready")
                await asyncio.sleep(0.2)
            assert proc.poll() is None and workers <= descendants(proc.pid)  # recovered, not restarted
    finally:
        if not _answers(postgres_server):
            postgres_server.start()
        stop_process(proc)


def _answers(server: PostgresServer) -> bool:
    try:
        psycopg.connect(server.url, connect_timeout=2).close()
    except psycopg.OperationalError:
        return False
    return True


async def test_a_search_inside_a_book_blocked_on_its_page_texts_answers_503_in_time(
    aiohttp_client: Any, url: str, tmp_path: Path
) -> None:
    """A search inside a book reads page texts on threads of its own, past the catalog's gate: with ``page_texts``
    locked in another session (the book itself still found), it answers 503 within ``WORK_DEADLINE`` while liveness
    and ``/img/`` answer at once. (The server's own statement timeout, 5 s when serving, would end the wait later; a
    hung server enforces none, which the lock stands in for here: a hang that begins after the book was found.)"""
    from imagesvc.tools.page_search_work import WORK_DEADLINE
    from tests.catalog.test_page_search import write_book

    catalog = PostgresCatalog(url)
    try:
        write_book(catalog, "aaaa", {1: ("gold and the furnace", None, None)})
    finally:
        catalog.close()
    client = await aiohttp_client(build_app(_settings(tmp_path, url)))
    search = "/api/books/aaaa/search?q=furnace"
    assert (await _timed(client, search))[0] == 200
    holder = psycopg.connect(url)
    holder.execute("LOCK TABLE page_texts IN ACCESS EXCLUSIVE MODE")
    net = threading.Timer(SAFETY + WORK_DEADLINE, holder.rollback)
    net.start()
    try:
        blocked = asyncio.ensure_future(_timed(client, search))
        await _uncatalogued_while(client, blocked, at_least=0)
        status, elapsed, body = await blocked
        assert status == 503 and body["error"] == "unavailable", (status, body)
        assert elapsed < WORK_DEADLINE + SLACK < STATEMENT_TIMEOUT, elapsed
    finally:
        net.cancel()
        holder.rollback()
        holder.close()
    assert (await _timed(client, search))[0] == 200  # the lock gone, the next search is served
