"""The gallery search engine of one process: the encoder, the vector index, the gallery table and a query cache.

Everything loads lazily on first use and reloads when the catalog or the index changes underneath (another process
ingested, withdrew a book, or re-indexed). Model and matrix work run in a thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from imagesvc.errors import NotFound
from imagesvc.search.clip import ClipSpec, Encoder, clip_spec
from imagesvc.search.gallery import GalleryTable, Query, Ranked, rank
from imagesvc.search.text import text_search
from imagesvc.search.vectors import VectorIndex, load_index

__all__ = ["SearchEngine", "engine_for"]

log = logging.getLogger("imagesvc.search")


def engine_for(services: Any) -> SearchEngine:
    """The engine riding on ``services`` (made on first call: every door passes the same Services object)."""
    engine = getattr(services, "search", None)
    if engine is None:
        engine = SearchEngine(services.settings, services.catalog)
        services.search = engine
    return engine


class SearchEngine:
    def __init__(self, settings: Any, catalog: Any, encoder: Encoder | None = None) -> None:
        self.settings = settings
        self.catalog = catalog
        self.spec: ClipSpec = clip_spec(settings)
        self.encoder = encoder or (Encoder(self.spec) if self.spec.enabled else None)
        self._data_dir = Path(settings.data_dir)
        self._lock = threading.Lock()
        self._index: VectorIndex | None = None
        self._index_stamp: float | None = None
        self._table: GalleryTable | None = None
        self._catalog_stamp: Any = None
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._memo: dict[str, tuple[Any, Any]] = {}

    # -- state -----------------------------------------------------------------------------------------------------

    def reset(self, data_dir: Path | None = None) -> None:
        """Forget the loaded index, gallery table and memos, and with ``data_dir`` read the vector index from there
        from now on (a catalog snapshot was switched in). The encoder and the text-query cache are kept."""
        with self._lock:
            if data_dir is not None:
                self._data_dir = Path(data_dir)
            self._index = self._index_stamp = self._table = self._catalog_stamp = None
            self._memo = {}

    def _pointer_stamp(self) -> float:
        try:
            return (self._data_dir / "vectors" / "current.json").stat().st_mtime_ns
        except FileNotFoundError:
            return 0.0

    def index(self) -> VectorIndex | None:
        """The current vector index (reloaded when ``imagesvc index`` wrote a new version)."""
        stamp = self._pointer_stamp()
        with self._lock:
            if stamp != self._index_stamp:
                self._index, self._index_stamp = load_index(self._data_dir), stamp
                self._table = None
        return self._index

    def table(self) -> GalleryTable:
        """The gallery table, rebuilt when another connection committed to the catalog."""
        index = self.index()
        stamp = self.catalog.query_one("PRAGMA data_version")
        with self._lock:
            if self._table is None or stamp != self._catalog_stamp:
                table = GalleryTable.from_catalog(self.catalog)
                table.attach(index.ids if self.clip_ready(index) and index else [])
                self._table, self._catalog_stamp = table, stamp
            return self._table

    def clip_ready(self, index: VectorIndex | None) -> bool:
        return self.encoder is not None and index is not None and index.model_key == self.spec.key and index.dims > 0

    def status(self) -> dict[str, Any]:
        """What search is doing, in words and numbers (for /health and search responses)."""
        index = self.index()
        out: dict[str, Any] = {"clip": self.spec.describe(), "mode": "full-text"}
        if index is not None:
            out["index"] = {
                "version": index.version,
                "vectors": len(index.ids),
                "dims": index.dims,
                "model": index.model_key,
                "written_at": index.meta.get("written_at"),
            }
        if self.clip_ready(index):
            out["mode"] = "clip+full-text"
        elif self.encoder is not None:
            out["clip"] += "; no index for this model yet: run `imagesvc index` (full-text only until then)"
        return out

    def memo(self, name: str, build: Any) -> Any:
        """``build()``'s result, kept until the index or the catalog changes (for derived listings)."""
        table = self.table()
        stamp = (id(table), id(self._index))
        hit = self._memo.get(name)
        if hit is None or hit[0] != stamp:
            hit = self._memo[name] = (stamp, build())
        return hit[1]

    # -- queries ---------------------------------------------------------------------------------------------------

    def _text_vector(self, text: str) -> np.ndarray:
        key = " ".join(text.casefold().split())
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        assert self.encoder is not None
        vector = self.encoder.encode_text([text])[0]
        with self._lock:
            self._cache[key] = vector
            while len(self._cache) > self.settings.query_cache_size:
                self._cache.popitem(last=False)
        return vector

    def vector_of(self, illustration_id: str) -> np.ndarray | None:
        index = self.index()
        row = index.row_of(illustration_id) if index is not None else None
        return None if row is None else index.embeddings[row]

    def _run(self, table: GalleryTable, q: Query, text_scores: dict[str, float] | None) -> Ranked:
        index = self._index
        vector = None
        if q.like is not None:
            if table.row_of(q.like) is None or not table.live[table.row_of(q.like)]:
                raise NotFound(
                    f"No illustration has the id {q.like!r}.",
                    details={"id": q.like},
                    recovery=["Take illustration ids from GET /gallery results."],
                )
            vector = self.vector_of(q.like) if self.clip_ready(index) else None
            if vector is None:
                raise NotFound(
                    f"Illustration {q.like!r} has no image embedding, so nothing can be ranked by likeness to it.",
                    recovery=["Run `imagesvc index` with CLIP weights configured (docs/search.md)."],
                    details={"id": q.like},
                )
        elif q.text and self.clip_ready(index):
            vector = self._text_vector(q.text)
        matrix = index.embeddings if index is not None and vector is not None else None
        return rank(table, q, matrix, vector, text_scores)

    async def search(self, q: Query) -> tuple[GalleryTable, Ranked]:
        """Rank ``q``; returns the table (to name rows) and the page. ``NotFound`` for an unknown ``like`` id."""
        # Catalog reads stay on the loop's thread (one SQLite connection); the numpy work goes to a thread.
        table = self.table()
        text_scores = text_search(self.catalog, q.text) if q.text and q.like is None else None
        return table, await asyncio.to_thread(self._run, table, q, text_scores)
