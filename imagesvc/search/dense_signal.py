"""The dense text signal of one search engine: the text model and the text index, kept current in worker threads,
and the query-vector cache that worker threads share."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from imagesvc.catalog.reader import reader
from imagesvc.errors import ImagesvcError
from imagesvc.search.dense import (
    TEXT_FOLDER,
    OtherModel,
    Passages,
    StaleWork,
    first_columns,
    sync_text_index,
    text_rows,
)
from imagesvc.search.glosses import glossary
from imagesvc.search.index_follower import Follower
from imagesvc.search.published import FETCH_ERRORS, IndexCorrupt
from imagesvc.search.text_models import TextModel
from imagesvc.search.threads import off_loop, submit
from imagesvc.search.vectors import VectorIndex, indexed_model, load_index

__all__ = ["DenseText", "QueryCache"]

log = logging.getLogger("imagesvc.search")


class QueryCache:
    """Encoded query vectors by normalised text, least recently used out first. Worker threads share it; the event
    loop never takes its lock."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._items: OrderedDict[str, np.ndarray] = OrderedDict()

    def vector(self, key: str, encode: Callable[[], np.ndarray]) -> np.ndarray:
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
                return hit
        vector = encode()
        with self._lock:
            self._items[key] = vector
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return vector


class DenseText:
    """The text index of ``catalog``'s live illustrations under the text model, brought up to date on demand: the one
    ``imagesvc index`` published (``follower``; never embedded here), or, on SQLite with an index in the data dir or
    none published, the data dir's own, embedding what changed."""

    def __init__(
        self,
        settings: Any,
        catalog: Any,
        data_dir: Path,
        model: TextModel | None,
        cache: QueryCache,
        follower: Follower | None = None,
    ):
        self.settings, self.catalog, self.data_dir, self.model, self.cache = settings, catalog, data_dir, model, cache
        self.follower = follower
        self.embedded = 0  # passages' illustrations this process embedded into the index (0 with a published one)
        self._state: tuple[VectorIndex, Passages] | None = None  # one reference: index and passages belong together
        self._stamp: Any = None
        self._job: asyncio.Future[Any] | None = None
        self.error: str | None = None
        self._other: str | None = None  # with an index of another model on disk: that model's key
        self.closed = False  # set when the search state this belongs to is replaced: work in flight stops
        self._lexicons_asked = False

    def _published(self, read: bool = True) -> bool:
        """Whether the index comes from the catalog's published one (always with PostgreSQL). ``read=False`` asks
        the catalog nothing (reports made on the event loop): the row last read decides."""
        if self.follower is None:
            return False
        if self.follower.only:
            return True
        return not self.follower.local() and (self.follower.row() if read else self.follower.last) is not None

    def _indexed_model(self) -> str | None:
        """The model the text index was embedded by (a small JSON read, or the published row's)."""
        if self._published():
            row = self.follower.row() if self.follower is not None else None
            return row["model"] if row else None
        return indexed_model(self.data_dir, TEXT_FOLDER)

    @property
    def on(self) -> bool:
        return self.model is not None and self._state is not None and not self.error

    def describe(self) -> str:
        """One plain sentence on the dense text signal, for /health and search responses."""
        if self.model is None:
            return "off (IMAGESVC_TEXT_MODEL=off): no dense text ranking"
        note = f" ({self.model.note})" if self.model.note else ""
        if self.model.info is None:
            return f"unavailable: {self.model.note}"
        if self.error:
            return f"unavailable: {self.error}"
        key = self.model.key
        if self._state is not None:
            return f"on: {key}, {len(self._state[1].ids)} illustrations embedded{note}"
        if self._job is not None and not self._job.done():
            return f"loading: {key} and the text index (keyword ranking until ready){note}"
        if self.follower is not None and self.follower.only and self._stamp is not None:
            if self.follower.rejected:
                why = "; ".join(self.follower.rejected.values())
                return f"unavailable: the published text index was refused ({why}); keyword ranking until fixed"
            return f"no published text index: run `imagesvc index` (keyword ranking until then); model {key}{note}"
        return f"on: {key}, loads on the first text query{note}"

    async def ready(self) -> bool:
        """Bring the text index up to date (model load and new embeddings in a thread) and say whether dense
        ranking can be used. Waits at most ``search_wait`` seconds; the work goes on after that."""
        if self.model is None or self.model.info is None:
            return False
        if self.error:
            if self._other is None or await self.catalog.gate.run(self._indexed_model) == self._other:
                return False
            self.error = self._other = None  # `imagesvc index` has re-embedded since: try again
            self._state = None
        stamp = await self.catalog.gate.run(self.catalog.query_one, "PRAGMA data_version")
        if self._stamp == stamp and (self._state is not None or (self.follower is not None and self.follower.only)):
            return self._state is not None  # with PostgreSQL and nothing published: keyword-only, asked once a change
        if self._job is None or self._job.done():
            self._job = asyncio.ensure_future(self._sync(stamp))
        try:
            await asyncio.wait_for(asyncio.shield(self._job), self.settings.search_wait)
        except TimeoutError:
            return self._state is not None
        except OtherModel as exc:
            self.error = f"{exc.message}: run `imagesvc index` (keyword ranking until then)"
            self._other = await self.catalog.gate.run(self._indexed_model) or ""
            log.error("dense text search is off: %s", self.error)
            return False
        except ImagesvcError as exc:
            self.error = exc.message
            log.error("dense text search is off: %s", exc.message)
            return False
        return self._state is not None

    def close(self) -> None:
        """Stop: a sync in flight ends at its next batch without saving, and nothing starts again."""
        self.closed = True
        self.error = self.error or "closed: its catalog snapshot was replaced"
        if self._job is not None:
            self._job.cancel()

    def _read_lexicons(self) -> None:
        """Read the query lexicons once, in a worker thread beside the text index, whichever way the index comes
        (embedded here or published): not in the first query in Latin letters (~1 s)."""
        if not self._lexicons_asked and self.model is not None and self.model.glossed:
            self._lexicons_asked = True
            submit(glossary().load, self.model.glossed)

    async def _sync(self, stamp: Any) -> None:
        self._read_lexicons()
        if self.follower is None and getattr(self.catalog, "dialect", "sqlite") == "postgres":
            self._stamp = stamp  # no store to fetch from, and a node never embeds a shared catalog's index itself
            return
        if await self.catalog.gate.run(self._published):
            await self._follow()
            if not self.closed and not (self.follower and self.follower.retrying(await self.follower.current_row())):
                self._stamp = stamp  # else the next query asks again (the store failed: retried after a pause)
            return
        try:
            state = await off_loop(self._load)
        except StaleWork:
            return
        if not self.closed:
            self._state, self._stamp = state, stamp

    async def _follow(self) -> None:
        """Fetch and load the published index when the catalog names a new one; a refused one changes nothing."""
        follower = self.follower
        assert follower is not None
        row = await follower.current_row()
        if row is None or not follower.wanted(row):
            return
        assert self.model is not None
        await off_loop(self.model.load)  # for the queries; a model that cannot load is not the index's fault
        try:
            folder = await follower.fetch(row)
            state = await off_loop(self._load_published, folder)
        except OtherModel:
            raise
        except FETCH_ERRORS as exc:
            follower.refuse(row, exc)
            return
        if not self.closed:
            self._state = state
            await off_loop(follower.loaded, row)

    def _load_published(self, folder: Path) -> tuple[VectorIndex, Passages]:
        assert self.model is not None
        index = load_index(folder, TEXT_FOLDER)
        if index is None:
            raise IndexCorrupt(f"the published text index in {folder} has no current.json")
        usable = self._usable(index)
        if usable is None:
            raise OtherModel(
                f"the published text index was embedded by {index.model_key}, and this node runs {self.model.key}",
                recovery=["Run `imagesvc index` with this node's IMAGESVC_TEXT_MODEL (docs/search.md)."],
            )
        return usable, self._passages(usable)

    def _usable(self, index: VectorIndex) -> VectorIndex | None:
        """``index`` as this node ranks with it (``first_columns``); a pair's index served by a node that fell back
        to its first model is said once in the log."""
        assert self.model is not None and self.model.info is not None
        usable = first_columns(index, self.model.key, self.model.info.dims)
        if usable is not None and usable is not index:
            log.warning(
                "text index of %s ranked with its first model's columns: %s; new illustrations are not embedded "
                "here until it can run",
                index.model_key,
                self.model.note,
            )
        return usable

    def _load(self) -> tuple[VectorIndex, Passages]:
        assert self.model is not None
        with reader(self.catalog) as source:
            rows = text_rows(source)
        self.model.load()
        indexed = self._indexed_model()
        current = load_index(self.data_dir, TEXT_FOLDER) if indexed and indexed != self.model.key else None
        usable = self._usable(current) if current is not None else None
        if usable is not None:  # a fallback node: the pair's index, read-only, with its own model's columns
            return usable, self._passages(usable)
        # never re-embed another model's index here (that is `imagesvc index`'s work), never rank with it either
        index, summary = sync_text_index(
            self.data_dir, rows, self.model, replace_other=False, still_wanted=lambda: not self.closed
        )
        self.embedded += summary.embedded
        return index, self._passages(index)

    def _passages(self, index: VectorIndex) -> Passages:
        info = self.model.info if self.model is not None else None
        if info is None:
            return Passages.of(index)
        return Passages.of(index, split=info.split)

    def source(self) -> dict[str, Any]:
        """Where the text index in service came from, for /health."""
        published = self._published(read=False) and self.follower is not None
        out = self.follower.describe() if published else {"source": "data dir"}  # type: ignore[union-attr]
        return out | {"embedded_here": self.embedded}

    def scores(self, text: str) -> tuple[list[str], np.ndarray] | None:
        """(illustration ids, best passage score of each) for ``text`` (blocking: call it in a worker thread)."""
        state, model = self._state, self.model
        if state is None or model is None or not len(state[0].ids):
            return None
        text = " ".join(text.split())  # the key is the text encoded: the model reads case, so the key keeps it
        vector = self.cache.vector("dense:" + text, lambda: model.query(text))
        assert model.info is not None
        if not np.isfinite(vector).all():  # damaged weights: the keyword hits must survive, unfused with NaN
            log.error("text model %s gave a non-finite vector for a query: dense ranking skipped", model.key)
            return None
        return state[1].ids, state[1].dense(state[0].embeddings, vector, model.info)
