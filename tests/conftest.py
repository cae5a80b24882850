"""Shared pytest fixtures; each block below belongs to one area of the suite."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.library import build_library, copy_library
from tests.servers import (
    PostgresServer,
    Redis,
    S3Server,
    ServerUnavailable,
    start_ceph_rgw,
    start_moto,
    start_postgres,
    start_redis,
    start_redis_cluster_node,
)

T = TypeVar("T")


# ---- real servers (tests/servers.py): started once per session, skipped when unavailable, failed when CI=true ----


def _serve(start: Callable[[], tuple[T, Callable[[], None]]]) -> Iterator[T]:
    """Run one server for the session. Where it cannot start: skip locally, but fail on CI (CI=true), so that a
    broken CI image never turns a backend's whole suite into silent skips."""
    try:
        info, stop = start()
    except ServerUnavailable as exc:
        reason = str(exc)
    else:
        reason = ""
    if reason:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and a test server is unavailable: {reason}", pytrace=False)
        pytest.skip(reason)
    try:
        yield info
    finally:
        stop()


@pytest.fixture(scope="session")
def moto_server() -> Iterator[S3Server]:
    yield from _serve(start_moto)


@pytest.fixture(scope="session")
def ceph_rgw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    workdir: Path = tmp_path_factory.mktemp("ceph")
    yield from _serve(lambda: start_ceph_rgw(workdir))


@pytest.fixture(scope="session")
def redis_server() -> Iterator[str]:
    """URL of a throw-away Redis (``redis://127.0.0.1:PORT/0``), empty at session start."""
    yield from _serve(start_redis)


@pytest.fixture(scope="session")
def redis_cluster_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a one-node Redis Cluster holding every slot (cross-slot commands and scripts are refused)."""
    workdir: Path = tmp_path_factory.mktemp("redis-cluster")
    yield from _serve(lambda: start_redis_cluster_node(workdir))


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """A throw-away PostgreSQL cluster on loopback (``tests.servers.create_database`` gives a test its own
    database); its ``stop()``/``start()`` take it down and back on the same port for outage tests."""
    workdir: Path = tmp_path_factory.mktemp("postgres")
    yield from _serve(lambda: start_postgres(workdir))


@pytest.fixture
def redis() -> Iterator[Redis]:
    """A Redis of the test's own, which it may stop and start again on its port (for outages; ``redis_server`` is
    shared by the session)."""

    def start() -> tuple[Redis, Callable[[], None]]:
        server = Redis()
        return server, server.close

    yield from _serve(start)


# ---- end of real servers ----


# ---- the demo library (tests/library.py): generated and ingested once per session ----


@pytest.fixture(scope="session")
def demo_library(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``{manifest, data, summary}``: the demo sources' manifest, the ingested data dir (read-only for tests: take a
    private copy with ``tests.library.copy_library``), and the ingest summary."""
    manifest, data, summary = build_library(tmp_path_factory.mktemp("demo"))
    return {"manifest": manifest, "data": data, "summary": summary}


@pytest.fixture
def data_dir(demo_library: dict[str, Any], tmp_path: Path) -> Path:
    """A private copy of the ingested demo library's data dir, for a test to serve, change or break."""
    return copy_library(demo_library["data"], tmp_path / "data")
