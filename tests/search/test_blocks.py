"""The window-hash index behind search by image: built once, then only new or changed illustrations are hashed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from imagesvc.catalog import Catalog
from imagesvc.catalog.writes import remove_illustration
from imagesvc.search.block_index import load_blocks, sync_blocks
from imagesvc.search.blocks import stored_boxes
from imagesvc.storage.local import LocalStore
from tests.library import copy_library


async def test_block_hashes_are_incremental_and_follow_removals(demo_library: dict[str, Any], tmp_path: Path) -> None:
    data = copy_library(demo_library["data"], tmp_path / "data")
    catalog, store = Catalog(data / "catalog.sqlite3"), LocalStore(data / "store")
    try:
        first, summary = await sync_blocks(data, catalog, store)
        live = catalog.query_all("SELECT id FROM illustrations WHERE removed = 0")
        assert (summary.hashed, summary.kept, summary.failed) == (len(live), 0, 0)
        assert first.hashes.dtype == np.uint64 and len(first.hashes) == len(live) * len(stored_boxes())
        _, again = await sync_blocks(data, catalog, store)
        assert (again.hashed, again.kept) == (0, len(live))
        gone = first.ids[0]
        with catalog.transaction() as conn:
            remove_illustration(conn, gone)
        third, after = await sync_blocks(data, catalog, store)
        assert (after.hashed, after.illustrations) == (0, len(live) - 1) and gone not in third.ids
        on_disk = load_blocks(data)
        assert on_disk is not None and on_disk.ids == third.ids
        assert np.array_equal(on_disk.hashes, third.hashes)
        kept = third.ids.index(first.ids[1])
        size = third.windows
        assert np.array_equal(third.hashes[kept * size : (kept + 1) * size], first.hashes[size : 2 * size])
    finally:
        catalog.close()
        await store.close()
