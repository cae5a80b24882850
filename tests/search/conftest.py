"""Search fixtures: a private copy of the demo library indexed with the tiny random-weights CLIP model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from imagesvc.catalog import Catalog
from imagesvc.search.clip import TINY_MODEL, Encoder, clip_spec
from imagesvc.search.index import IndexSummary, run_index
from imagesvc.storage.local import LocalStore
from tests.http.test_languages_doors import site  # noqa: F401  (a warmed server with the text model on)
from tests.library import copy_library, settings_for

TINY = {"clip_model": TINY_MODEL, "clip_weights": "random", "clip_threads": 1}


async def index_library(settings: Any, *, full: bool = False) -> IndexSummary:
    """Run the index job over ``settings.data_dir`` as ``imagesvc index`` does."""
    store = LocalStore(settings.data_dir / "store")
    catalog = Catalog(settings.data_dir / "catalog.sqlite3")
    try:
        return await run_index(settings, catalog, store, Encoder(clip_spec(settings)), full=full)
    finally:
        catalog.close()
        await store.close()


@pytest.fixture
def tiny_settings(demo_library: dict[str, Any], tmp_path: Path) -> Any:
    return settings_for(copy_library(demo_library["data"], tmp_path / "data"), **TINY)
