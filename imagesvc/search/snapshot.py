"""One immutable view of what gallery search ranks: the catalog's table and the vector matrix, read together.

A ``SearchSnapshot`` is built in a worker thread from a connection of its own (``build_snapshot``), never on the
event loop, and replaces the previous one whole. A request takes one snapshot at its start and reads only that one,
so its table rows and matrix rows always come from the same catalog generation and index version, whatever is swapped
in meanwhile. Listings derived from a snapshot (``/vectors`` stores, the spelling vocabulary, arrays that ranking
precomputes) live in its ``derived`` map and die with it: nothing derived is keyed on object ids.
"""

from __future__ import annotations

import asyncio
import sqlite3
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from imagesvc.catalog.reader import reader
from imagesvc.search.page_cuts import prepared
from imagesvc.search.ranking import GalleryTable
from imagesvc.search.threads import off_loop
from imagesvc.search.vectors import VectorIndex, load_index

__all__ = ["BUILD_ERRORS", "SearchSnapshot", "Stamps", "build_snapshot", "index_stamp"]

T = TypeVar("T")


@dataclass(frozen=True)
class Stamps:
    """What a snapshot was read at: the serving connection's ``PRAGMA data_version`` (it moves when another
    connection or process commits) and the modification time of the vector index pointer (0: no index)."""

    catalog: Any
    index: Any  # int: the data dir's pointer's mtime; str: the digest of the published index


def index_stamp(data_dir: Path) -> int:
    try:
        return (data_dir / "vectors" / "current.json").stat().st_mtime_ns
    except FileNotFoundError:
        return 0


@dataclass(frozen=True, eq=False)
class SearchSnapshot:
    """Generation ``generation`` of one engine's search state. Treat every field as read-only."""

    generation: int
    stamps: Stamps
    table: GalleryTable  # every illustration; ``vec_row`` maps its rows to rows of ``index`` (-1: no vector)
    index: VectorIndex | None  # as loaded, whatever its model
    clip: bool  # whether ``index`` was embedded by this engine's CLIP model (only then is it ranked by)
    # Built on demand from this snapshot alone (``derive``): vector listings, the vocabulary, and the place for arrays
    # that ranking precomputes from ``table`` and ``matrix`` (name them "rank:..."); they are dropped with the snapshot.
    derived: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def matrix(self) -> np.ndarray | None:
        """The CLIP vectors ``table.vec_row`` points into, or None when CLIP cannot rank."""
        return self.index.embeddings if self.clip and self.index is not None else None

    def vector_of(self, illustration_id: str) -> np.ndarray | None:
        row = self.index.row_of(illustration_id) if self.clip and self.index is not None else None
        return None if row is None else self.index.embeddings[row]  # type: ignore[union-attr]

    async def derive(self, name: str, build: Callable[[], T]) -> T:
        """``build()``'s result for this snapshot, computed once in a worker thread; concurrent callers share it."""
        job = self.derived.get(name)
        if job is None:
            job = self.derived[name] = asyncio.ensure_future(off_loop(build))
        try:
            return await asyncio.shield(job)
        except BaseException:
            if job.done() and self.derived.get(name) is job and (job.cancelled() or job.exception() is not None):
                del self.derived[name]  # the next caller tries again
            raise


def build_snapshot(
    catalog: Any, data_dir: Path | None, model_key: str | None, stamps: Stamps, generation: int
) -> SearchSnapshot:
    """Read the index in ``data_dir`` (None: no index) and build the gallery table (blocking: call it in a worker
    thread).

    Raises what reading a corrupt index raises (``OSError``, ``ValueError``, ``KeyError``, ``sqlite3.Error``...)."""
    index = load_index(data_dir) if data_dir is not None else None
    clip = model_key is not None and index is not None and index.model_key == model_key and index.dims > 0
    with reader(catalog) as source:
        table = GalleryTable.from_catalog(source)
    table.attach(index.ids if clip and index is not None else [])
    table.row_of("")  # the id -> row map, built here rather than by the first request that needs it
    if clip and index is not None:
        prepared(table, len(index.embeddings))  # the fast path's per-table arrays, likewise
    return SearchSnapshot(generation, stamps, table, index, clip)


BUILD_ERRORS = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, sqlite3.Error)
