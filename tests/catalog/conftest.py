"""The ``backend`` fixture: every catalog test here runs once on SQLite and once on PostgreSQL."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from imagesvc.catalog import Catalog
from tests.servers import create_database


@dataclass
class Backend:
    """A fresh, empty catalog location of one dialect; ``open()`` opens a connection (pool) to it, as a second node
    or process would; ``settings`` are the IMAGESVC_* variables naming it."""

    dialect: str
    opener: Callable[[], Catalog]
    settings: dict[str, str]
    opened: list[Catalog]

    def open(self) -> Catalog:
        catalog = self.opener()
        self.opened.append(catalog)
        return catalog


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: Any, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        path = tmp_path / "catalog.sqlite3"
        found = Backend("sqlite", lambda: Catalog(path), {"IMAGESVC_CATALOG": "sqlite"}, [])
    else:
        from imagesvc.catalog.postgres import PostgresCatalog

        server = request.getfixturevalue("postgres_server")
        url = create_database(server, f"t_{secrets.token_hex(6)}")
        settings = {"IMAGESVC_CATALOG": "postgres", "IMAGESVC_DATABASE_URL": url}
        found = Backend("postgres", lambda: PostgresCatalog(url, pool_size=4, pool_timeout=1.0), settings, [])
    yield found
    for catalog in found.opened:
        catalog.close()


@pytest.fixture
def catalog(backend: Backend) -> Catalog:
    return backend.open()
