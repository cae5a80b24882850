"""A serving worker's warm-up (``imagesvc.search.by_image.warm_up``, run at start before the node says it is ready)
loads and warms everything the first searches need: after it, the first search by image and the first text search
load no index, read no table or vocabulary and load no model; they are as fast as the hundredth
(``benchmarks/warm_start.py`` measures it)."""

from __future__ import annotations

from typing import Any

import pytest

from imagesvc.catalog import Catalog
from imagesvc.search.block_index import sync_blocks
from imagesvc.search.by_image import matcher_for, warm_up
from imagesvc.search.engine import engine_for
from imagesvc.search.ranking import Query
from imagesvc.services import Services
from imagesvc.storage.local import LocalStore
from imagesvc.tools.image_search import search_by_picture
from tests.library import settings_for
from tests.search.conftest import TINY, index_library


def _loaded(services: Services) -> dict[str, Any]:
    engine, matcher = engine_for(services), matcher_for(services)
    return {
        "tables read": engine.table_reads + engine.table_updates,
        "vocabularies read": engine.vocabulary_reads + engine.vocabulary_updates,
        "block indexes loaded": matcher.loads,
        "text model loaded": engine.text_model is not None and engine.text_model.loaded,
        "clip loaded": engine.encoder is not None and engine.encoder._model is not None,
    }


@pytest.mark.slow
async def test_after_the_warm_up_the_first_searches_load_nothing(tiny_settings: Any) -> None:
    data = tiny_settings.data_dir
    await index_library(tiny_settings)  # CLIP's vectors
    catalog, store = Catalog(data / "catalog.sqlite3"), LocalStore(data / "store")
    try:
        await sync_blocks(data, catalog, store, workers=1)  # the block index
        services = Services(settings_for(data, search_wait=300, **TINY), catalog, store)
        await warm_up(services)
        warmed = _loaded(services)
        assert warmed == {
            "tables read": 1,
            "vocabularies read": 1,
            "block indexes loaded": 1,
            "text model loaded": True,
            "clip loaded": True,
        }
        iid = matcher_for(services)._index.ids[0]  # type: ignore[union-attr]
        row = catalog.renditions([iid])[iid]["display"]
        found = await search_by_picture(services, (await store.get(row["clean_key"])).data, None, 5)
        assert found["same_block"][0]["id"] == iid and found["similar"]
        assert found["search"]["signals"] == ["block-hashes", "clip"]
        text = await engine_for(services).search(Query(text="a furnace with bellows"))
        assert text.ranked.rows and {"clip", "dense-text", "full-text"} <= set(text.signals)
        assert _loaded(services) == warmed  # nothing loaded or read by the first searches
    finally:
        catalog.close()
        await store.close()
