"""The local-feature index behind search by image: made by ``imagesvc index``, incremental, resumable, following
removals, and loaded as published."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from imagesvc.catalog import Catalog
from imagesvc.catalog.writes import remove_illustration
from imagesvc.search.block_index import current_digest, load_blocks, sync_blocks
from imagesvc.storage.local import LocalStore
from tests.library import copy_library


async def test_block_features_are_incremental_resumable_and_follow_removals(
    demo_library: dict[str, Any], tmp_path: Path
) -> None:
    data = copy_library(demo_library["data"], tmp_path / "data")
    catalog, store = Catalog(data / "catalog.sqlite3"), LocalStore(data / "store")
    try:
        live = catalog.query_all("SELECT id FROM illustrations WHERE removed = 0")
        first, summary = await sync_blocks(data, catalog, store, full=True, workers=1)
        assert (summary.extracted, summary.failed, summary.illustrations) == (len(live), 0, len(live))
        assert summary.descriptors > 100 * len(live) and summary.cpu_seconds > 0
        _, again = await sync_blocks(data, catalog, store, workers=1)
        assert (again.extracted, again.kept) == (0, len(live))
        gone = first.ids[0]
        with catalog.transaction() as conn:
            remove_illustration(conn, gone)
        third, after = await sync_blocks(data, catalog, store, workers=1)
        assert (after.extracted, after.illustrations) == (0, len(live) - 1) and gone not in third.ids
        assert third.digest != first.digest and current_digest(data) == third.digest
        on_disk = load_blocks(data)
        assert on_disk is not None and on_disk.ids == third.ids
        assert on_disk.features.descriptors == third.features.descriptors
        # an interrupted run: the features files written so far are kept, a cut-short one is made again
        shards = sorted((data / "featureindex" / "features").glob("*.npz"))
        cut = shards[0].read_bytes()[:100]
        shards[0].unlink()
        shards[0].write_bytes(cut)
        _, resumed = await sync_blocks(data, catalog, store, workers=1)
        assert 0 < resumed.extracted < len(live) and resumed.illustrations == len(live) - 1
    finally:
        catalog.close()
        await store.close()


async def test_features_made_before_keypoint_shapes_are_extracted_again(
    demo_library: dict[str, Any], tmp_path: Path
) -> None:
    """An index upgraded from one without each keypoint's orientation and level: its features files are made again
    (the votes need the shapes), and the loaded index carries one shape per keypoint."""
    import numpy as np

    data = copy_library(demo_library["data"], tmp_path / "data")
    catalog, store = Catalog(data / "catalog.sqlite3"), LocalStore(data / "store")
    try:
        first, _ = await sync_blocks(data, catalog, store, full=True, workers=1)
        for path in (data / "featureindex" / "features").glob("*.npz"):  # as an earlier version wrote them
            with np.load(path) as old:
                kept = {k: old[k] for k in old.files if k != "shape"}
            with open(path, "wb") as f:
                np.savez(f, **kept)
        again, summary = await sync_blocks(data, catalog, store, workers=1)
        assert summary.extracted == len(first.ids) and summary.kept == 0
        loaded = load_blocks(data)
        assert loaded is not None and loaded.features.shape is not None
        assert len(loaded.features.shape) == loaded.features.descriptors == again.features.descriptors
        assert int(loaded.features.shape[:, 1].max()) > 0  # pyramid levels, not a zero filler
    finally:
        catalog.close()
        await store.close()


async def test_an_index_made_before_descriptors_were_kept_beside_it_is_rebuilt_without_extracting_again(
    demo_library: dict[str, Any], tmp_path: Path, monkeypatch: Any
) -> None:
    """Format v3 keeps every descriptor beside the index (memory-mapped, for guided matching and expansion): an
    index made by v2 still loads and answers (without them), and the next ``imagesvc index`` makes a v3 index from
    the features files already there, extracting nothing again."""
    import numpy as np

    from imagesvc.search import block_index
    from imagesvc.search.by_image import match_picture
    from imagesvc.search.features import decode_reduced

    data = copy_library(demo_library["data"], tmp_path / "data")
    catalog, store = Catalog(data / "catalog.sqlite3"), LocalStore(data / "store")
    try:
        monkeypatch.setattr(block_index, "PARAMS", block_index.PARAMS.replace("-v3", "-v2"))
        old, _ = await sync_blocks(data, catalog, store, full=True, workers=1)
        (data / "featureindex" / f"index-{old.digest}.desc.npy").unlink()  # as v2 wrote it
        loaded = load_blocks(data)
        assert loaded is not None and loaded.features.desc is None
        tiers = catalog.renditions([loaded.ids[0]])[loaded.ids[0]]
        picture = decode_reduced((await store.get(tiers["display"]["clean_key"])).data, 1200)
        assert [m.id for m in match_picture(loaded, picture)][:1] == [loaded.ids[0]]
        monkeypatch.undo()
        new, summary = await sync_blocks(data, catalog, store, workers=1)
        assert new.digest != old.digest and summary.extracted == 0 and summary.kept == len(old.ids)
        loaded = load_blocks(data)
        assert loaded is not None and isinstance(loaded.features.desc, np.memmap)
        assert loaded.features.desc.shape == (loaded.features.descriptors, 32)
        assert not (data / "featureindex" / f"index-{old.digest}.faiss").exists()
    finally:
        catalog.close()
        await store.close()
