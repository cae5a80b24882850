"""Fixtures for the access-state contract suite: one backend object per real backend (Redis: the session server)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from imagesvc.access import AccessState
from imagesvc.access.redis import RedisAccess
from imagesvc.access.sqlite import SqliteAccess

MakeAccess = Callable[[], AccessState]


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
        url = request.getfixturevalue("redis_server")
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
