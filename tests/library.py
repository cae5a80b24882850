"""The demo library, generated and ingested once per test session, and cheap per-test copies of it."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import shutil
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from fixtures.generate import generate
from imagesvc.catalog import Catalog
from imagesvc.ingest.manifest import load_manifest
from imagesvc.ingest.pipeline import IngestSummary, ingest
from imagesvc.settings import load_settings
from imagesvc.storage.local import LocalStore

__all__ = ["build_library", "copy_library", "run_ingest", "settings_for"]

SITE = "https://library.example"


def settings_for(data_dir: Path, **overrides: Any) -> Any:
    """Settings for a test app on ``data_dir`` (local storage, SQLite access state)."""
    values: dict[str, Any] = {"data_dir": data_dir, "site_url": SITE, "workers": 2, "session_secret": "test-secret"}
    values.update(overrides)
    return load_settings({}, **values)


def run_ingest(manifest: Path, settings: Any, store: Any = None) -> IngestSummary:
    async def go() -> IngestSummary:
        target = store or LocalStore(settings.data_dir / "store")
        catalog = Catalog(settings.data_dir / "catalog.sqlite3")
        pool = ProcessPoolExecutor(max_workers=settings.workers, mp_context=multiprocessing.get_context("spawn"))
        try:
            return await ingest(
                load_manifest(manifest), settings=settings, catalog=catalog, store=target, pool=pool, progress=False
            )
        finally:
            pool.shutdown()
            catalog.close()
            await target.close()

    return asyncio.run(go())


def build_library(root: Path) -> tuple[Path, Path, IngestSummary]:
    """Generate the demo sources under ``root/src`` and ingest them into ``root/data``."""
    manifest = generate(root / "src")
    data = root / "data"
    summary = run_ingest(manifest, settings_for(data))
    index_blocks(data)
    return manifest, data, summary


def index_blocks(data: Path) -> None:
    """The local-feature index of search by image, as ``imagesvc index`` makes it (serving nodes only load it)."""
    from imagesvc.search.block_index import sync_blocks

    async def go() -> None:
        catalog, store = Catalog(data / "catalog.sqlite3"), LocalStore(data / "store")
        try:
            await sync_blocks(data, catalog, store, workers=1)
        finally:
            catalog.close()
            await store.close()

    asyncio.run(go())


def copy_library(source: Path, target: Path) -> Path:
    """A private copy of an ingested data dir: objects hard-linked (stores never modify a file in place), the catalog
    copied, no access state."""
    shutil.copytree(source / "store", target / "store", copy_function=os.link)
    for name in os.listdir(source):
        if name.startswith("catalog.sqlite3"):
            shutil.copy2(source / name, target / name)
    if (source / "featureindex").is_dir():  # search by image's index, made once by build_library
        shutil.copytree(source / "featureindex", target / "featureindex")  # copied: tests rewrite its files
    if (source / "c2pa").is_dir():  # the local signing CA that signed the public tiers at ingest
        shutil.copytree(source / "c2pa", target / "c2pa")
    return target
