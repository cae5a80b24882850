"""The index job: embeds every live illustration once, then only what is new or changed, and publishes atomically."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from imagesvc.catalog import Catalog
from imagesvc.catalog.writes import remove_illustration
from imagesvc.search.vectors import load_index
from tests.search.conftest import index_library


def live_ids(settings: Any) -> list[str]:
    catalog = Catalog(settings.data_dir / "catalog.sqlite3")
    try:
        return [r["id"] for r in catalog.query_all("SELECT id FROM illustrations WHERE removed = 0")]
    finally:
        catalog.close()


async def test_first_run_embeds_everything_and_a_second_run_embeds_nothing(tiny_settings: Any) -> None:
    ids = live_ids(tiny_settings)
    first = await index_library(tiny_settings)
    assert (first.embedded, first.kept, first.vectors, first.failed) == (len(ids), 0, len(ids), 0)
    index = load_index(tiny_settings.data_dir)
    assert index is not None and sorted(index.ids) == sorted(ids)
    assert index.embeddings.shape == (len(ids), 64)
    assert np.allclose(np.linalg.norm(index.embeddings, axis=1), 1.0, atol=1e-5)

    second = await index_library(tiny_settings)
    # nothing changed, nothing rewritten: the same files, so the published index keeps its digest and no node reloads
    assert (second.embedded, second.kept, second.version) == (0, len(ids), first.version)
    again = load_index(tiny_settings.data_dir)
    assert again is not None and again.ids == index.ids
    assert np.array_equal(again.embeddings, index.embeddings)


async def test_only_changed_and_removed_illustrations_are_touched(tiny_settings: Any) -> None:
    await index_library(tiny_settings)
    changed, gone = live_ids(tiny_settings)[:2]
    catalog = Catalog(tiny_settings.data_dir / "catalog.sqlite3")
    with catalog.transaction() as conn:
        conn.execute("UPDATE illustrations SET content_sha256 = 'new-bytes' WHERE id = ?", (changed,))
        remove_illustration(conn, gone)
    catalog.close()
    summary = await index_library(tiny_settings)
    assert (summary.embedded, summary.dropped) == (1, 1)
    index = load_index(tiny_settings.data_dir)
    assert index is not None and gone not in index.ids and changed in index.ids
    assert index.hashes[index.ids.index(changed)] == "new-bytes"


async def test_versions_are_swapped_atomically_and_old_ones_pruned(tiny_settings: Any) -> None:
    for _ in range(4):
        summary = await index_library(tiny_settings, full=True)  # rewritten each time (an unchanged run keeps it)
    folder = tiny_settings.data_dir / "vectors"
    pointer = json.loads((folder / "current.json").read_text())
    assert pointer["version"] == summary.version == 4
    assert pointer["model"] == "imagesvc-tiny|random" and pointer["dims"] == 64
    assert sorted(p.name for p in folder.iterdir()) == ["current.json", "index-3.npz", "index-4.npz"]


async def test_the_same_random_model_is_rebuilt_in_every_process(tiny_settings: Any) -> None:
    """Index job and server each build the model: with random weights they must agree, or search is noise."""
    from imagesvc.search.clip import Encoder, clip_spec

    a, b = Encoder(clip_spec(tiny_settings)), Encoder(clip_spec(tiny_settings))
    assert np.allclose(a.encode_text(["a serpent"]), b.encode_text(["a serpent"]), atol=1e-6)
