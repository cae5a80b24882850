"""Search work for a replaced catalog snapshot stops and never recreates the snapshot's removed folder.

A node that follows snapshots builds each generation's search state in that generation's folder; when a newer
snapshot replaces it, the folder is removed. Text embedding still in flight for the old one used to run to its end and
save its index, recreating the folder (a 98 MB orphan after 1,073 s at 1,500 books).
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from imagesvc.catalog import Catalog
from imagesvc.catalog import writes as w
from imagesvc.search.block_index import sync_blocks
from imagesvc.search.dense import TEXT_FOLDER, StaleWork, sync_text_index, text_rows
from imagesvc.search.engine import SearchEngine
from imagesvc.search.text_models import shared_model
from imagesvc.search.vectors import VectorIndex, save_index
from tests.library import copy_library, settings_for

MANY = 600  # illustrations: tens of seconds of embedding, so the work is surely in flight when replaced


def _add_illustrations(catalog: Catalog, count: int) -> None:
    book = {"id": "eeee", "slug": "many-pictures", "title": "Many pictures", "author": "Anon.", "language": "Latin",
            "attribution": {"institution": "A library", "item_url": "https://example.org/many"}}  # fmt: skip
    no_image = {"image_unavailable": 0, "unavailable_reason": None, "master_key": None, "master_sha256": None,
                "master_format": None, "derivation": None, "width": 100, "height": 100}  # fmt: skip
    with catalog.transaction() as conn:
        w.upsert_book(conn, book, "hash")
        for n in range(1, count + 1):
            page = {"id": f"eeee-{n}", "book_id": "eeee", "number": n, "ocr": None, "translation": None,
                    "original": None, **no_image}  # fmt: skip
            ill = {
                "id": f"eeee-{n}:0",
                "index": 0,
                "bbox": {"x": 0, "y": 0, "width": 1, "height": 1},
                "type": "emblem",
                "description": f"A lion number {n} devouring the sun over a furnace {n * 7}.",
            }
            w.upsert_page(conn, page, {}, [ill])  # fmt: skip


@pytest.fixture
def folder(demo_library: dict[str, Any], tmp_path: Path) -> Path:
    """A snapshot's folder: a catalog copy with many illustrations and no text index yet."""
    data = copy_library(demo_library["data"], tmp_path / "snapshots" / "v2")
    shutil.rmtree(data / TEXT_FOLDER, ignore_errors=True)
    catalog = Catalog(data / "catalog.sqlite3")
    try:
        _add_illustrations(catalog, MANY)
    finally:
        catalog.close()
    return data


async def test_embedding_for_a_replaced_snapshot_stops_and_leaves_no_folder(folder: Path) -> None:
    catalog = Catalog(folder / "catalog.sqlite3")
    settings = settings_for(folder, text_model="e5", search_wait=0)
    engine = SearchEngine(settings, catalog, data_dir=folder)
    assert await engine.dense.ready() is False  # answers at once; the embedding goes on in a worker thread
    await asyncio.sleep(1)  # the model loads and the first batch is embedded
    assert not engine.dense._job.done()  # type: ignore[union-attr]  # the premise: work in flight
    engine.close()  # what the follower does when a newer snapshot replaces this one
    catalog.close()
    shutil.rmtree(folder)
    await asyncio.get_running_loop().shutdown_default_executor()  # every worker thread has ended
    assert not folder.exists()  # before: the finished index was saved there, recreating the folder
    assert engine.dense._state is None and not engine.dense.on  # stopped unfinished, not failed on something else
    assert engine.dense.error is not None and "replaced" in engine.dense.error
    assert await engine.dense.ready() is False


def test_an_unwanted_sync_embeds_nothing_and_saves_nothing(folder: Path) -> None:
    catalog = Catalog(folder / "catalog.sqlite3")
    try:
        rows = text_rows(catalog)
    finally:
        catalog.close()
    with pytest.raises(StaleWork):
        sync_text_index(folder, rows, shared_model(), still_wanted=lambda: False)
    assert not (folder / TEXT_FOLDER).exists()


def test_index_writers_never_recreate_a_removed_data_dir(tmp_path: Path) -> None:
    gone = tmp_path / "snapshots" / "v1"
    vectors = VectorIndex(["a-1:0"], ["h"], np.ones((1, 4), np.float32), "test")
    with pytest.raises(FileNotFoundError):
        save_index(gone, vectors, 5)
    empty = Catalog(tmp_path / "catalog.sqlite3")  # a real catalog with no illustrations
    try:
        with pytest.raises(FileNotFoundError):
            asyncio.run(sync_blocks(gone, empty, store=None))
    finally:
        empty.close()
    assert not gone.exists() and not gone.parent.exists()
