"""The engine's search snapshot: table and matrix of one generation, pinned by whoever took it, swapped whole, and
kept when a rebuild fails."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from imagesvc.catalog import Catalog
from imagesvc.catalog.schema import SCHEMA_VERSION
from imagesvc.errors import Unavailable
from imagesvc.search.clip import clip_spec
from imagesvc.search.engine import SearchEngine
from imagesvc.search.ranking import Query
from imagesvc.search.snapshot import SearchSnapshot
from imagesvc.search.vectors import VectorIndex, load_index, save_index
from tests.library import settings_for
from tests.search.conftest import TINY
from tests.search.test_loop_lag import big_library


@pytest.fixture
def engine(tmp_path: Path) -> Any:
    data = tmp_path / "data"
    data.mkdir()
    settings = settings_for(data, **TINY)
    big_library(data, settings, rows=400, books=4)
    catalog = Catalog(data / "catalog.sqlite3")
    yield SearchEngine(settings, catalog)
    catalog.close()


def consistent(snap: SearchSnapshot) -> None:
    """Every table row's vector is the one its illustration id was embedded for, in this snapshot's matrix."""
    assert snap.index is not None and snap.table.vec_row is not None and snap.matrix is not None
    rows = np.flatnonzero(snap.table.vec_row >= 0)
    assert len(rows) == len(snap.index.ids)
    for r in rows.tolist():
        assert snap.index.ids[snap.table.vec_row[r]] == snap.table.ids[r]


def reindex_reversed(engine: SearchEngine) -> VectorIndex:
    """A new index version of the live illustrations in the opposite row order (what a re-index may write)."""
    old = load_index(engine._data_dir)
    assert old is not None
    ids = [i for i in reversed(old.ids) if engine.catalog.illustration(i) is not None]
    vectors = np.stack([old.embeddings[old.row_of(i)] for i in ids])  # type: ignore[index]
    new = VectorIndex(ids, ["h"] * len(ids), vectors, clip_spec(engine.settings).key)
    save_index(engine._data_dir, new, SCHEMA_VERSION)
    return new


def remove_first(engine: SearchEngine) -> str:
    """Remove the first illustration from another connection (as ``imagesvc`` run elsewhere would)."""
    writer = sqlite3.connect(engine.catalog.path)
    with writer:
        gone = writer.execute("SELECT min(id) FROM illustrations").fetchone()[0]
        writer.execute("UPDATE illustrations SET removed = 1 WHERE id = ?", (gone,))
    writer.close()
    return gone


async def test_a_request_finishes_on_the_snapshot_it_started_on(engine: SearchEngine) -> None:
    first = await engine.snapshot()
    like = first.table.ids[5]
    before = engine._run(first, Query(like=like, limit=20), None)
    consistent(first)

    gone = remove_first(engine)
    reindex_reversed(engine)
    second = await engine.snapshot()
    assert second.generation > first.generation and engine.current is second
    consistent(second)
    assert not second.table.live[second.table.row_of(gone)]

    # The request that took the first snapshot ranks on it to the end: same table, same matrix, same answer.
    consistent(first)
    assert first.table.live[first.table.row_of(gone)]
    again = engine._run(first, Query(like=like, limit=20), None)
    assert [first.table.ids[r] for r in again.rows] == [first.table.ids[r] for r in before.rows]
    assert again.similarity == before.similarity
    assert await engine.snapshot() is second  # nothing changed since: no rebuild


async def test_derived_listings_belong_to_their_snapshot(engine: SearchEngine) -> None:
    first = await engine.snapshot()
    built: list[int] = []
    assert await first.derive("n", lambda: built.append(1) or len(first.table)) == 400
    assert await first.derive("n", lambda: built.append(1) or -1) == 400  # computed once
    remove_first(engine)
    second = await engine.snapshot()
    assert await second.derive("n", lambda: int(second.table.live.sum())) == 399
    assert built == [1]


async def test_a_corrupt_index_keeps_the_old_snapshot_and_says_why(
    engine: SearchEngine, caplog: pytest.LogCaptureFixture
) -> None:
    first = await engine.snapshot()
    pointer = engine._data_dir / "vectors" / "current.json"
    npz = engine._data_dir / "vectors" / load_index(engine._data_dir).meta["file"]  # type: ignore[union-attr]
    npz.write_bytes(b"not a numpy archive")
    pointer.touch()  # a new index version, as far as the engine can tell
    remove_first(engine)
    with caplog.at_level(logging.ERROR, logger="imagesvc.search"):
        assert await engine.snapshot() is first
        assert await engine.snapshot() is first  # not rebuilt on every request while nothing changes
    failures = [r for r in caplog.records if "rebuild failed" in r.getMessage()]
    assert len(failures) == 1 and f"generation {first.generation}" in failures[0].getMessage()
    assert "rebuild_error" in engine.status()

    reindex_reversed_from(engine, first)
    fixed = await engine.snapshot()
    assert fixed is not first and fixed.index is not None
    consistent(fixed)
    assert "rebuild_error" not in engine.status()


def reindex_reversed_from(engine: SearchEngine, snap: SearchSnapshot) -> None:
    assert snap.index is not None
    ids = list(reversed(snap.index.ids))
    vectors = np.stack([snap.index.embeddings[snap.index.row_of(i)] for i in ids])  # type: ignore[index]
    save_index(engine._data_dir, VectorIndex(ids, ["h"] * len(ids), vectors, snap.index.model_key), SCHEMA_VERSION)


async def test_no_snapshot_to_keep_is_unavailable_not_an_error(engine: SearchEngine) -> None:
    npz = engine._data_dir / "vectors" / load_index(engine._data_dir).meta["file"]  # type: ignore[union-attr]
    npz.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(Unavailable, match="Gallery search cannot start"):
        await engine.snapshot()


async def test_the_app_keeps_answering_from_the_old_snapshot_when_the_index_is_corrupt(
    aiohttp_client: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from imagesvc.app import build_app

    data = tmp_path / "data"
    data.mkdir()
    settings = settings_for(data, **TINY)
    big_library(data, settings, rows=400, books=4)
    client = await aiohttp_client(build_app(settings))
    first = await (await client.get("/api/vectors/gallery", params={"limit": "1"})).json()
    assert first["total"] == 400
    npz = data / "vectors" / load_index(data).meta["file"]  # type: ignore[union-attr]
    npz.write_bytes(npz.read_bytes()[:100])  # truncated by a full disk, say
    (data / "vectors" / "current.json").touch()
    writer = sqlite3.connect(data / "catalog.sqlite3")
    with writer:
        writer.execute("UPDATE illustrations SET removed = 1 WHERE id = (SELECT min(id) FROM illustrations)")
    writer.close()
    with caplog.at_level(logging.ERROR, logger="imagesvc.search"):
        listing = await client.get("/api/vectors/gallery", params={"limit": "1"})
        gallery = await client.get("/api/gallery", params={"limit": "1"})
    assert listing.status == 200 and (await listing.json())["total"] == 400  # the whole old snapshot, not half a new
    assert gallery.status == 200
    assert any("rebuild failed, still serving generation" in r.getMessage() for r in caplog.records)
    health = await (await client.get("/health")).json()
    assert "BadZipFile" in health["search"]["rebuild_error"]
