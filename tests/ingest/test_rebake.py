"""`imagesvc marks rebake`: new marks from clean copies, the old ones gone, and ingest agrees afterwards."""

from __future__ import annotations

import asyncio
import io
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from imagesvc.catalog import Catalog
from imagesvc.ingest.rebake import RebakeSummary, rebake_marks
from imagesvc.storage.local import LocalStore
from tests.library import copy_library, run_ingest, settings_for


def _rebake(settings: Any, books: list[str]) -> RebakeSummary:
    async def go() -> RebakeSummary:
        store = LocalStore(settings.data_dir / "store")
        catalog = Catalog(settings.data_dir / "catalog.sqlite3")
        pool = ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn"))
        try:
            return await rebake_marks(settings=settings, catalog=catalog, store=store, pool=pool, books=books)
        finally:
            pool.shutdown()
            catalog.close()

    return asyncio.run(go())


def _display(data: Path, slug: str, number: int) -> tuple[str, np.ndarray]:
    catalog = Catalog(data / "catalog.sqlite3")
    try:
        page = catalog.page(catalog.find_book(slug)["id"], number)
        key = catalog.renditions([page["id"]])[page["id"]]["display"]["public_key"]
    finally:
        catalog.close()
    pixels = np.asarray(Image.open(io.BytesIO((data / "store" / key).read_bytes())).convert("L"), dtype=np.float64)
    return key, pixels


def test_rebake_redraws_marks_and_ingest_agrees(demo_library: dict[str, Any], tmp_path: Path) -> None:
    data = copy_library(demo_library["data"], tmp_path / "data")
    slug = "demo-speculum-fornacum"
    old_key, old = _display(data, slug, 2)
    renamed = settings_for(data, site_name="Another Library of Old Books", site_url="https://books.example.net")
    summary = _rebake(renamed, [slug])
    assert summary.books == 1 and summary.changed > 0
    new_key, new = _display(data, slug, 2)
    assert new_key != old_key
    assert not (data / "store" / old_key).exists()  # the old marked copy is gone
    assert new.shape == old.shape  # the demo pages have margins: the mark sits in one
    changed = np.abs(new - old) > 8
    assert 0.001 < changed.mean() < 0.12  # the mark's text changed, in its box; the page is the same
    again = run_ingest(demo_library["manifest"], renamed)
    rendered_elsewhere = again.pages_rendered
    assert rendered_elsewhere == 19  # only the three other books (7 + 6 + 6 pages with images) are re-marked
    _rebake(settings_for(data), [slug])
    assert _display(data, slug, 2)[0] == old_key  # back to the original settings: the very same image data


@pytest.mark.slow
def test_a_stopped_rebake_goes_on_where_it_stopped(demo_library: dict[str, Any], tmp_path: Path) -> None:
    """A rebake stopped after one book (each book commits on its own), run again, re-marks only the other books;
    a third run finds nothing left to do."""
    data = copy_library(demo_library["data"], tmp_path / "data")
    renamed = settings_for(data, site_name="Another Library of Old Books", site_url="https://books.example.net")
    first = _rebake(renamed, ["demo-speculum-fornacum"])
    assert first.skipped == 0 and first.renditions > 0
    rest = _rebake(renamed, [])
    assert rest.skipped > 0 and rest.renditions > 0  # the first book's pages are skipped, the others re-marked
    catalog = Catalog(data / "catalog.sqlite3")
    try:
        held = catalog.scalar("SELECT COUNT(*) FROM pages WHERE image_unavailable = 0")
    finally:
        catalog.close()
    again = _rebake(renamed, [])
    assert again.renditions == 0 and again.skipped == held
