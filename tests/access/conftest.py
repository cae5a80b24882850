"""Fixtures for the access-state contract suite: a private Redis server and one backend object per real backend."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from imagesvc.access import AccessState
from imagesvc.access.redis import RedisAccess
from imagesvc.access.sqlite import SqliteAccess

MakeAccess = Callable[[], AccessState]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def access_redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A throwaway redis-server on a free local port, no persistence; skipped if missing (failed under CI=true)."""
    binary = shutil.which("redis-server")
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("redis-server is not installed (apt-get install redis-server)")
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    port = free_port()
    workdir = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"redis-server did not answer PING on port {port}")
        time.sleep(0.05)
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(params=["sqlite", "redis"])
async def make_access(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MakeAccess]:
    """A factory of backend objects that all share one store (one file, or one Redis prefix), like app instances."""
    made: list[AccessState] = []
    if request.param == "sqlite":
        path = tmp_path / "access.sqlite3"

        def make() -> AccessState:
            made.append(SqliteAccess(path))
            return made[-1]

    else:
        url = request.getfixturevalue("access_redis_url")
        prefix = f"test:{request.node.name}:{time.time_ns()}:"

        def make() -> AccessState:
            made.append(RedisAccess(url, prefix=prefix))
            return made[-1]

    yield make
    for access in made:
        await access.close()


@pytest.fixture
async def access(make_access: MakeAccess) -> AccessState:
    return make_access()
