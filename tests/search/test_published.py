"""Published search indexes on the embedded backends (SQLite, local store): ``imagesvc index``'s publish path names
each index in the catalog by the sha256 of its manifest, and a node whose data dir holds no index of its own (a
catalog-snapshot follower) loads what the catalog names, embeds nothing, follows a newer one without a restart, and
refuses a tampered or missing file while it keeps the index it has.
"""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

from PIL import Image

from imagesvc.catalog import Catalog
from imagesvc.catalog import writes as w
from imagesvc.search.block_index import PARAMS, sync_blocks
from imagesvc.search.by_image import matcher_for
from imagesvc.search.dense import run_text_index
from imagesvc.search.engine import engine_for
from imagesvc.search.published import current, publish, seed_local, verify_cached
from imagesvc.services import Services
from imagesvc.storage.local import LocalStore
from tests.library import copy_library, settings_for


def _blocks_published(catalog: Catalog, store: LocalStore, data: Path) -> str:
    async def go() -> str:
        _, summary = await sync_blocks(data, catalog, store, workers=1)
        done = await publish(catalog, store, "blocks", data, model=PARAMS, illustrations=summary.illustrations)
        assert done is not None
        return done.digest

    return asyncio.run(go())


def _withdraw(catalog: Catalog, slug: str) -> None:
    with catalog.transaction() as conn:
        assert w.withdraw_book(conn, catalog.find_book(slug)["id"])  # type: ignore[index]


def _files(store: LocalStore, digest: str, kind: str) -> list[str]:
    manifest = json.loads(store.path_for(f"indexes/{kind}/{digest}.json").read_text())
    return [f"indexes/{kind}/files/{f['sha256']}" for f in manifest["files"].values()]


async def test_a_node_follows_published_block_indexes_and_refuses_bad_ones(
    demo_library: dict[str, Any], tmp_path: Path
) -> None:
    indexer = copy_library(demo_library["data"], tmp_path / "indexer")
    catalog, store = Catalog(indexer / "catalog.sqlite3"), LocalStore(indexer / "store")
    node_dir = tmp_path / "node"  # a node that reads the same catalog and store, with no index of its own
    node_catalog = Catalog(indexer / "catalog.sqlite3")
    services = Services(settings_for(node_dir, search_wait=30), node_catalog, LocalStore(indexer / "store"))
    try:
        first = await asyncio.to_thread(_blocks_published, catalog, store, indexer)
        again = await publish(catalog, store, "blocks", indexer, model=PARAMS, illustrations=38)
        assert again is not None and not again.changed and again.digest == first  # named by content: no new row

        matcher = matcher_for(services)
        index = await matcher.ready()
        assert index is not None and matcher.state().startswith(f"ready: {len(index.ids)} illustrations")
        everything = len(index.ids)
        # The published index finds an illustration from its own stored picture.
        row = node_catalog.renditions([index.ids[0]])[index.ids[0]]["display"]
        picture = Image.open(io.BytesIO((await store.get(row["clean_key"])).data))
        assert (await matcher.same_block(picture))[0].id == index.ids[0]
        assert not (node_dir / "featureindex").exists()  # nothing built on the node

        # A newer index is picked up by the running node on its next search.
        _withdraw(catalog, "demo-speculum-fornacum")
        second = await asyncio.to_thread(_blocks_published, catalog, store, indexer)
        index = await matcher.ready()
        assert index is not None and len(index.ids) == everything - 12
        assert current(node_catalog, "blocks")["digest"] == second  # type: ignore[index]

        # A tampered file: refused, the node keeps the index it has.
        _withdraw(catalog, "demo-traite-des-mines")
        tampered = await asyncio.to_thread(_blocks_published, catalog, store, indexer)
        victim = _files(store, tampered, "blocks")[-1]
        await store.put(victim, b"not the published bytes")
        index = await matcher.ready()
        assert index is not None and len(index.ids) == everything - 12
        assert "does not match its manifest" in matcher.follower.rejected[tampered]  # type: ignore[union-attr]

        # A missing file: refused alike.
        _withdraw(catalog, "demo-gart-der-kreuter")
        missing = await asyncio.to_thread(_blocks_published, catalog, store, indexer)
        await store.delete(_files(store, missing, "blocks")[-1])
        index = await matcher.ready()
        assert index is not None and len(index.ids) == everything - 12
        assert missing in matcher.follower.rejected  # type: ignore[union-attr]
        # The store keeps the version in the catalog and the one before it; older ones are pruned.
        manifests = {info.key async for info in store.list("indexes/blocks/") if info.key.endswith(".json")}
        assert manifests == {f"indexes/blocks/{missing}.json", f"indexes/blocks/{tampered}.json"}
        # The node's cache keeps the version in service and one more.
        assert len(list((node_dir / "index-cache" / "blocks").iterdir())) <= 2
    finally:
        catalog.close()
        node_catalog.close()
        await store.close()


async def test_a_tampered_cached_copy_is_refused_when_loaded_and_fetched_again(
    demo_library: dict[str, Any], tmp_path: Path
) -> None:
    """A node's cached copy of the published index is checked against the catalog's digest each time a worker
    loads it, not only when it was downloaded: a copy swapped on disk for another version's files (under the
    published digest, its manifest kept) is refused, removed and fetched again, and the worker serves what the
    catalog names."""
    indexer = copy_library(demo_library["data"], tmp_path / "indexer")
    catalog, store = Catalog(indexer / "catalog.sqlite3"), LocalStore(indexer / "store")
    node_dir = tmp_path / "node"
    node_catalog = Catalog(indexer / "catalog.sqlite3")

    def worker() -> Services:  # a worker of the node: its own engine, the node's data dir and cache
        return Services(settings_for(node_dir, search_wait=30), node_catalog, LocalStore(indexer / "store"))

    try:
        first = await asyncio.to_thread(_blocks_published, catalog, store, indexer)
        index = await matcher_for(worker()).ready()
        assert index is not None
        everything = len(index.ids)
        _withdraw(catalog, "demo-speculum-fornacum")
        second = await asyncio.to_thread(_blocks_published, catalog, store, indexer)
        index = await matcher_for(worker()).ready()
        assert index is not None and len(index.ids) == everything - 12

        cached = node_dir / "index-cache" / "blocks"
        swapped = cached / second / "featureindex"  # the first version's files under the second's digest
        for path in swapped.iterdir():
            path.unlink()
        for path in (cached / first / "featureindex").iterdir():
            path.rename(swapped / path.name)
        restarted = matcher_for(worker())
        index = await restarted.ready()
        assert index is not None and len(index.ids) == everything - 12  # the withdrawn book's 12 are not served
        assert restarted.follower is not None and not restarted.follower.rejected
        verify_cached(cached / second, "blocks", second)  # fetched again: the copy matches the catalog's digest
    finally:
        catalog.close()
        node_catalog.close()
        await store.close()


async def test_a_snapshot_follower_ranks_with_the_published_text_index_and_embeds_nothing(
    demo_library: dict[str, Any], tmp_path: Path
) -> None:
    """The text index no longer stays behind on the ingest host: a node with an empty data dir ranks densely at
    its first text query, from the index ``imagesvc index`` published, having embedded no description."""
    indexer = copy_library(demo_library["data"], tmp_path / "indexer")
    settings = settings_for(indexer)
    catalog, store = Catalog(indexer / "catalog.sqlite3"), LocalStore(indexer / "store")
    node_dir = tmp_path / "node"
    node_catalog = Catalog(indexer / "catalog.sqlite3")
    services = Services(settings_for(node_dir, search_wait=30), node_catalog, LocalStore(indexer / "store"))
    try:
        summary = await run_text_index(settings, catalog)
        assert summary is not None and summary.embedded > 0
        done = await publish(catalog, store, "text", indexer, model=summary.model, illustrations=summary.vectors)
        assert done is not None and done.changed

        engine = engine_for(services)
        assert await engine.dense_ready()
        assert engine.dense.embedded == 0 and not (node_dir / "textvectors").exists()
        status = engine.status()
        assert status["text_index"] == {"source": "published", "digest": done.digest, "embedded_here": 0}
        assert "illustrations embedded" in status["text_model"]
        from imagesvc.search.ranking import Query

        found = await engine.search(Query(text="furnace"))
        assert "dense-text" in found.signals and found.dense

        # `imagesvc index` on a fresh machine starts from the published index: nothing to embed again.
        fresh = tmp_path / "fresh-indexer"
        assert await seed_local(catalog, store, "text", fresh)
        again = await run_text_index(settings_for(fresh), catalog)
        assert again is not None and (again.embedded, again.kept) == (0, summary.vectors)
    finally:
        catalog.close()
        node_catalog.close()
        await store.close()


async def test_clip_vectors_are_followed_from_the_published_index(tiny_settings: Any, tmp_path: Path) -> None:
    """CLIP's vectors come the same way: a node with no vectors of its own ranks by CLIP once they are published,
    and says which index it serves."""
    from tests.search.conftest import TINY, index_library

    indexer = tiny_settings.data_dir
    summary = await index_library(tiny_settings)
    catalog, store = Catalog(indexer / "catalog.sqlite3"), LocalStore(indexer / "store")
    node_catalog = Catalog(indexer / "catalog.sqlite3")
    services = Services(settings_for(tmp_path / "node", **TINY), node_catalog, LocalStore(indexer / "store"))
    try:
        engine = engine_for(services)
        assert not (await engine.snapshot()).clip  # nothing published yet: no CLIP ranking
        done = await publish(catalog, store, "clip", indexer, model=summary.model, illustrations=summary.vectors)
        assert done is not None
        snap = await engine.snapshot()  # the catalog moved: rebuilt with the published vectors
        assert snap.clip and snap.index is not None and len(snap.index.ids) == summary.vectors
        assert engine.status()["clip_index"] == {"source": "published", "digest": done.digest}
        assert "clip" in engine.signals(snap) and not (tmp_path / "node" / "vectors").exists()

        # A newer one with an altered file: refused; the snapshot keeps the vectors in service and is not rebuilt
        # again and again for it.
        pointer = json.loads((indexer / "vectors" / "current.json").read_text())
        (indexer / "vectors" / "current.json").write_text(json.dumps(pointer | {"written_at": "later"}))
        bad = await publish(catalog, store, "clip", indexer, model=summary.model, illustrations=summary.vectors)
        assert bad is not None and bad.changed
        manifest = json.loads(store.path_for(f"indexes/clip/{bad.digest}.json").read_text())
        altered = manifest["files"]["vectors/current.json"]["sha256"]
        await store.put(f"indexes/clip/files/{altered}", b"{}")
        kept = await engine.snapshot()
        assert kept.clip and kept.generation > snap.generation and await engine.snapshot() is kept
        status = engine.status()["clip_index"]
        assert status["digest"] == done.digest and "does not match its manifest" in status["refused"][bad.digest]
    finally:
        catalog.close()
        node_catalog.close()
        await store.close()
