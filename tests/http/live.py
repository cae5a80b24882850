"""The real app served from a thread on a loopback port, over the demo library in SQLite or in PostgreSQL: for tests
that drive it with plain blocking HTTP (hypothesis) on both catalog backends."""

from __future__ import annotations

import asyncio
import http.client
import json
import multiprocessing
import secrets
import threading
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from aiohttp import web

from imagesvc.app import build_app
from imagesvc.catalog.backends import open_catalog
from imagesvc.ingest.manifest import load_manifest
from imagesvc.ingest.pipeline import ingest
from imagesvc.storage.local import LocalStore
from tests.library import settings_for
from tests.servers import PostgresServer, create_database

__all__ = ["Answer", "Live", "library_settings", "new_key", "postgres_library", "serve"]


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    text: str

    def json(self) -> Any:
        def refuse(name: str) -> Any:
            raise ValueError(f"not JSON: {name}")

        return json.loads(self.text, parse_constant=refuse)


@dataclass(frozen=True)
class Live:
    """A served app: its port, its settings and an enterprise key (1,000 requests a minute: ``fresh()`` gives each
    test one of its own)."""

    port: int
    key: str
    backend: str
    settings: Any

    def fresh(self) -> Live:
        """The same app with a new enterprise key."""
        return replace(self, key=new_key(self.settings))

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> Answer:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request(method, path, body=body, headers={"Authorization": f"Bearer {self.key}", **(headers or {})})
            resp = conn.getresponse()
            return Answer(resp.status, resp.getheader("Content-Type") or "", resp.read().decode(errors="replace"))
        finally:
            conn.close()


def postgres_library(server: PostgresServer, demo_manifest: Path, data: Path) -> str:
    """The demo library ingested into a new PostgreSQL database (objects in ``data``'s local store); its URL."""
    url = create_database(server, f"lib_{secrets.token_hex(5)}")
    settings = library_settings(data, url)

    async def go() -> None:
        catalog, store = open_catalog(settings), LocalStore(data / "store")
        pool = ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn"))
        try:
            await ingest(
                load_manifest(demo_manifest), settings=settings, catalog=catalog, store=store, pool=pool, progress=False
            )
        finally:
            pool.shutdown()
            catalog.close()
            await store.close()

    asyncio.run(go())
    return url


def library_settings(data: Path, database_url: str | None = None, **overrides: Any) -> Any:
    """Settings over ``data``: its SQLite catalog, or the PostgreSQL one at ``database_url``."""
    if database_url:
        overrides |= {"catalog": "postgres", "database_url": database_url}
    return settings_for(data, **overrides)


def new_key(settings: Any) -> str:
    """A new enterprise key in the catalog ``settings`` name."""
    from imagesvc.catalog.api_keys import create_key

    catalog = open_catalog(settings)
    try:
        return create_key(catalog, "enterprise", "live test")[0]
    finally:
        catalog.close()


@contextmanager
def serve(settings: Any, backend: str) -> Iterator[Live]:
    """The real app for ``settings`` on a loopback port, its loop in a thread, with a fresh enterprise key."""
    key = new_key(settings)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(build_app(settings))
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield Live(port, key, backend, settings)
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()
