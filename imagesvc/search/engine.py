"""The gallery search engine of one process: the encoder, the vector index, the gallery table and a query cache.

Everything loads lazily on first use and reloads when the catalog or the index changes underneath (another process
ingested, withdrew a book, or re-indexed). Model and matrix work run in a thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from imagesvc.errors import ImagesvcError, NotFound
from imagesvc.search.clip import ClipSpec, Encoder, clip_spec
from imagesvc.search.dense import (
    MODEL_KEY,
    Passages,
    TextModel,
    illustration_text,
    shared_model,
    sync_text_index,
    text_rows,
)
from imagesvc.search.fusion import fuse
from imagesvc.search.gallery import GalleryTable, Query, Ranked, rank
from imagesvc.search.spelling import Vocabulary
from imagesvc.search.text import matching_ids, text_search
from imagesvc.search.vectors import VectorIndex, load_index

__all__ = ["Scored", "SearchEngine", "engine_for"]

log = logging.getLogger("imagesvc.search")


def engine_for(services: Any) -> SearchEngine:
    """The engine riding on ``services`` (made on first call: every door passes the same Services object)."""
    engine = getattr(services, "search", None)
    if engine is None:
        engine = SearchEngine(services.settings, services.catalog)
        services.search = engine
    return engine


@dataclass
class Scored:
    """A ranked page with the per-signal scores behind it and the signals that ranked it."""

    table: GalleryTable
    ranked: Ranked
    fts: dict[str, float] = field(default_factory=dict)
    dense: dict[str, float] = field(default_factory=dict)
    signals: list[str] = field(default_factory=list)
    corrected: dict[str, str] = field(default_factory=dict)  # query word -> the library word searched instead


class SearchEngine:
    def __init__(
        self, settings: Any, catalog: Any, encoder: Encoder | None = None, text_model: TextModel | None = None
    ) -> None:
        self.settings = settings
        self.catalog = catalog
        self.spec: ClipSpec = clip_spec(settings)
        self.encoder = encoder or (Encoder(self.spec) if self.spec.enabled else None)
        on = getattr(settings, "text_model", "off") != "off"
        self.text_model = text_model or (shared_model() if on else None)
        self._dense: VectorIndex | None = None
        self._dense_stamp: Any = None
        self._dense_groups = Passages([], np.zeros(0, np.int64))
        self._dense_job: asyncio.Future[Any] | None = None
        self._dense_error: str | None = None
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
            self._dense = self._dense_stamp = None
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

    def text_model_state(self) -> str:
        """One plain sentence on the dense text signal, for /health and search responses."""
        if self.text_model is None:
            return "off (IMAGESVC_TEXT_MODEL=off): no dense text ranking"
        if self._dense_error:
            return f"unavailable: {self._dense_error}"
        if self._dense is not None:
            return f"on: {MODEL_KEY}, {len(self._dense_groups.ids)} illustrations embedded"
        if self._dense_job is not None:
            return f"loading: {MODEL_KEY} and the text index (keyword ranking until ready)"
        return f"on: {MODEL_KEY}, loads on the first text query"

    def signals(self) -> list[str]:
        """The signals a text query is ranked by right now."""
        out = ["clip"] if self.clip_ready(self.index()) else []
        if self.text_model is not None and self._dense is not None and not self._dense_error:
            out.append("dense-text")
        return [*out, "full-text"]

    def status(self) -> dict[str, Any]:
        """What search is doing, in words and numbers (for /health and search responses)."""
        index = self.index()
        signals = self.signals()
        out: dict[str, Any] = {
            "clip": self.spec.describe(),
            "text_model": self.text_model_state(),
            "mode": "+".join(signals),
            "signals": signals,
        }
        if index is not None:
            out["index"] = {
                "version": index.version,
                "vectors": len(index.ids),
                "dims": index.dims,
                "model": index.model_key,
                "written_at": index.meta.get("written_at"),
            }
        if self.encoder is not None and not self.clip_ready(index):
            out["clip"] += "; no index for this model yet: run `imagesvc index` (no CLIP ranking until then)"
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

    # -- dense text ----------------------------------------------------------------------------------------------

    async def dense_ready(self) -> bool:
        """Bring the dense text index up to date (model load and new embeddings in a thread) and say whether dense
        ranking can be used. Waits at most ``search_wait`` seconds; the work goes on after that."""
        if self.text_model is None or self._dense_error:
            return False
        stamp = self.catalog.query_one("PRAGMA data_version")
        if self._dense is not None and self._dense_stamp == stamp:
            return True
        if self._dense_job is None or self._dense_job.done():
            rows = text_rows(self.catalog)  # read on the loop's thread: one SQLite connection
            self._dense_job = asyncio.ensure_future(asyncio.to_thread(self._sync_dense, rows, stamp))
        try:
            await asyncio.wait_for(asyncio.shield(self._dense_job), self.settings.search_wait)
        except TimeoutError:
            return self._dense is not None
        except ImagesvcError as exc:
            self._dense_error = exc.message
            log.error("dense text search is off: %s", exc.message)
            return False
        return self._dense is not None

    def _sync_dense(self, rows: list[dict[str, Any]], stamp: Any) -> None:
        assert self.text_model is not None
        self.text_model.load()
        index, _ = sync_text_index(self._data_dir, rows, self.text_model)
        groups = Passages.of(index)
        with self._lock:
            self._dense, self._dense_stamp, self._dense_groups = index, stamp, groups

    def _dense_scores(self, text: str) -> tuple[list[str], np.ndarray] | None:
        dense = self._dense
        if dense is None or self.text_model is None or not len(dense.ids):
            return None
        key = "dense:" + " ".join(text.casefold().split())
        with self._lock:
            vector = self._cache.get(key)
        if vector is None:
            vector = self.text_model.encode([text])[0]
            with self._lock:
                self._cache[key] = vector
                while len(self._cache) > self.settings.query_cache_size:
                    self._cache.popitem(last=False)
        groups = self._dense_groups
        return groups.ids, groups.best(dense.embeddings @ vector)

    def excluded(self, terms: tuple[str, ...]) -> frozenset[str]:
        """Ids of illustrations whose text matches any of ``terms`` as keywords (negative query terms)."""
        out: set[str] = set()
        for term in terms:
            out |= matching_ids(self.catalog, term)
        return frozenset(out)

    async def search(self, q: Query) -> Scored:
        """Rank ``q``: the page, its per-signal scores and the signals used. ``NotFound`` for an unknown ``like``."""
        # Catalog reads stay on the loop's thread (one SQLite connection); model and numpy work go to a thread.
        table = self.table()
        if not (q.text and q.like is None):
            return Scored(table, await asyncio.to_thread(self._run, table, q, None), signals=self.signals())
        use_dense = await self.dense_ready()
        fixes: dict[str, str] = {}
        if use_dense and self.text_model is not None:  # spelling needs the model's dictionary
            vocabulary = self.memo("vocabulary", lambda: Vocabulary(map(illustration_text, text_rows(self.catalog))))
            text, fixes = await asyncio.to_thread(vocabulary.correct, q.text, self.text_model.is_common_word)
            q = replace(q, text=text)
        fts = text_search(self.catalog, q.text)  # type: ignore[arg-type]

        def work() -> tuple[Ranked, dict[str, float], dict[str, float]]:
            found = self._dense_scores(q.text) if use_dense else None  # type: ignore[arg-type]
            fused, dense = fuse(found[0], found[1], fts) if found else fuse([], None, fts)
            return self._run(table, q, fused), dense, fused

        ranked, dense, _ = await asyncio.to_thread(work)
        signals = [s for s in self.signals() if s != "dense-text" or use_dense]
        return Scored(table, ranked, fts, dense, signals, fixes)
