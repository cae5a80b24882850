"""The gallery search engine of one process: the encoder, the current search snapshot and a query-vector cache.

The snapshot (gallery table and vector matrix of one catalog generation, ``imagesvc.search.snapshot``) is built on
first use and rebuilt when the catalog or the index changes underneath (another process ingested, withdrew a book, or
re-indexed): in a worker thread, beside the old one, then swapped in whole by the event loop. A request ranks on the
snapshot it took at its start. Model, matrix and catalog-scan work never run on the event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from imagesvc.catalog import Catalog
from imagesvc.catalog.reader import reader
from imagesvc.errors import NotFound, Unavailable
from imagesvc.search.changes import changed_books, updated_table
from imagesvc.search.clip import ClipSpec, Encoder, clip_spec
from imagesvc.search.dense import illustration_text, text_rows
from imagesvc.search.dense_signal import DenseText, QueryCache
from imagesvc.search.e5_model import models_root
from imagesvc.search.fusion import fuse_rows
from imagesvc.search.glosses import Gloss
from imagesvc.search.index_follower import Follower
from imagesvc.search.keyword_cache import KeywordCache
from imagesvc.search.page_cuts import prepared
from imagesvc.search.published import CACHE, FETCH_ERRORS, FOLDERS
from imagesvc.search.ranking import GalleryTable, Query, Ranked, TextScores, changes_seq, rank
from imagesvc.search.snapshot import BUILD_ERRORS, SearchSnapshot, Stamps, build_snapshot, index_stamp
from imagesvc.search.spelling import Vocabulary
from imagesvc.search.text import KeywordHits, ids_of_rowids, keyword_hits, matching_ids
from imagesvc.search.text_models import TextModel, shared_model
from imagesvc.search.threads import off_loop

__all__ = ["Scored", "SearchEngine", "engine_for"]

log = logging.getLogger("imagesvc.search")


def engine_for(services: Any) -> SearchEngine:
    """The engine riding on ``services`` (made on first call: every door passes the same Services object)."""
    engine = getattr(services, "search", None)
    if engine is None:
        engine = SearchEngine(services.settings, services.catalog, store=getattr(services, "store", None))
        services.search = engine
    return engine


@dataclass
class Scored:
    """A ranked page with the per-signal scores behind it and the signals that ranked it."""

    table: GalleryTable
    ranked: Ranked
    generation: int  # of the snapshot it was ranked on
    fts: dict[str, float] = field(default_factory=dict)  # the page's results' keyword scores (only theirs)
    dense: dict[str, float] = field(default_factory=dict)  # and their dense cosines
    signals: list[str] = field(default_factory=list)
    corrected: dict[str, str] = field(default_factory=dict)  # query word -> the library word searched instead
    glossed: Gloss | None = None  # how a query in a glossed language was read (``glosses``), when dense ranked it


class SearchEngine:
    def __init__(
        self,
        settings: Any,
        catalog: Any,
        encoder: Encoder | None = None,
        text_model: TextModel | None = None,
        data_dir: Path | None = None,
        store: Any = None,
    ) -> None:
        self.settings = settings
        self.catalog = catalog
        self.spec: ClipSpec = clip_spec(settings)
        self.encoder = encoder or (Encoder(self.spec) if self.spec.enabled else None)
        on = getattr(settings, "text_model", "off") != "off"
        models = models_root(getattr(settings, "model_dir", ""))
        self.text_model = text_model or (shared_model(settings.text_model, models=models) if on else None)
        self._data_dir = Path(data_dir or settings.data_dir)  # where the vector indexes are read from
        self._rows_of_dense: tuple[GalleryTable, list[str], np.ndarray] | None = None  # ``_dense_rows``
        # Snapshot state: read and written by the event loop only.
        self._snap: SearchSnapshot | None = None
        self._job: asyncio.Future[SearchSnapshot] | None = None
        self._generation = 0
        self.table_reads = 0  # gallery tables read whole (the first, and the fallback)
        self.table_updates = 0  # gallery tables brought up to date book by book (imagesvc.search.changes)
        self.vocabulary_reads = 0  # spelling vocabularies read whole (the first, and the fallback)
        self.vocabulary_updates = 0  # spelling vocabularies brought up to date book by book
        self._failed: tuple[Stamps, str] | None = None  # the stamps a rebuild failed at, and why
        self.cache = QueryCache(settings.query_cache_size)  # query vectors, shared by worker threads
        # The indexes `imagesvc index` published (with no store: the data dir's only); cached in the node's data dir.
        cache = Path(settings.data_dir) / CACHE
        self.followers: dict[str, Follower] = {}
        if store is not None:
            self.followers = {kind: Follower(kind, catalog, store, self._data_dir, cache) for kind in FOLDERS}
        self._clip_row: tuple[Any, dict[str, Any] | None] = (object(), None)  # (data_version read at, row)
        self._clip_dir: Path | None = None  # the published CLIP index in service
        text = self.followers.get("text")
        self.dense = DenseText(settings, catalog, self._data_dir, self.text_model, self.cache, text)
        self._readers: queue.SimpleQueue[Catalog] = queue.SimpleQueue()  # SQLite connections keyword queries reuse
        self.keywords = KeywordCache()  # recent queries' keyword matches, per snapshot generation

    def close(self) -> None:
        """Retire this engine (its catalog snapshot was replaced): builds and text embedding in flight stop, and
        nothing they would have written lands in its data dir."""
        if self._job is not None:
            self._job.cancel()
        self.dense.close()
        while not self._readers.empty():
            self._readers.get_nowait().close()

    # -- the snapshot ----------------------------------------------------------------------------------------------

    @property
    def current(self) -> SearchSnapshot | None:
        """The snapshot in service now (None before the first is built)."""
        return self._snap

    def stamps(self) -> Stamps:
        """The catalog generation and index version as of now (a cheap pragma and a stat, or the published index's
        digest, read again only when the catalog moved)."""
        version = self.catalog.query_one("PRAGMA data_version")
        follower = self._clip_follower()
        if follower is None:
            return Stamps(version, index_stamp(self._data_dir))
        if self._clip_row[0] != version:
            self._clip_row = (version, follower.row())
        row = self._clip_row[1]
        if row is not None and follower.wanted(row):
            return Stamps(version, row["digest"])  # a new index to fetch
        return Stamps(version, follower.digest or 0)  # the one in service (a refused one, or one to retry later)

    def _clip_follower(self, read: bool = True) -> Follower | None:
        """The published CLIP index's follower when it is the source (CLIP on; PostgreSQL, or SQLite with no index
        in the data dir and one published), else None. ``read=False`` asks the catalog nothing (the event loop's
        own callers): a row not yet read counts as none."""
        follower = self.followers.get("clip")
        if follower is None or self.encoder is None or follower.local():
            return None
        if not follower.only and self._clip_row[1] is None and (not read or follower.row() is None):
            return None
        return follower

    async def _clip_source(self, stamps: Stamps) -> tuple[Path | None, dict[str, Any] | None, Stamps]:
        """Where to read the CLIP index for ``stamps``: the data dir, the published index in service, or a newly
        published one fetched now (returned with its row, to confirm once it loads); and the stamps of what is read.
        A refused one changes nothing: the snapshot is stamped with the index in service."""
        follower = await self.catalog.gate.run(self._clip_follower)
        if follower is None:
            return self._data_dir, None, stamps
        row = self._clip_row[1]
        in_service = replace(stamps, index=follower.digest or 0)
        if row is None or not follower.wanted(row) or stamps.index != row["digest"]:
            return self._clip_dir, None, in_service
        try:
            return await follower.fetch(row), row, stamps
        except FETCH_ERRORS as exc:
            follower.refuse(row, exc)
            return self._clip_dir, None, in_service

    async def snapshot(self) -> SearchSnapshot:
        """The snapshot to answer from: the current one while the catalog and the index are unchanged since it was
        read, else a new one built in a worker thread and swapped in whole. Only the callers that need search wait
        for a build; the event loop goes on serving. A failed rebuild is logged and the old snapshot kept until the
        catalog or the index moves again; with no snapshot to keep, ``Unavailable``."""
        for _ in range(2):  # a write during the build: build once more, then answer with what is there
            stamps = await self.catalog.gate.run(self.stamps)  # catalog reads: off the loop, under the deadline
            snap = self._snap
            if snap is not None and stamps == snap.stamps:
                return snap
            if self._failed is not None and self._failed[0] == stamps:
                if snap is not None:
                    return snap
                raise Unavailable(f"Gallery search cannot start: {self._failed[1]}", recovery=_REBUILD)
            if self._job is None:
                self._job = asyncio.ensure_future(self._rebuild(stamps))
            await asyncio.shield(self._job)
        if self._snap is None:
            raise Unavailable("Gallery search cannot start: the catalog changed throughout the build.")
        return self._snap

    def _updated(self, old: SearchSnapshot, stamps: Stamps, generation: int) -> SearchSnapshot | None:
        """``old`` with its gallery table brought up to date book by book and its vectors kept (blocking: a worker
        thread); None when the whole table must be read again."""
        index = old.index if old.clip else None
        with reader(self.catalog) as source:
            table = updated_table(source, old.table, index.row_of if index is not None else None)
        if table is None:
            return None
        table.row_of("")  # the id -> row map, built here rather than by the first request that needs it
        if old.clip and old.index is not None:
            prepared(table, len(old.index.embeddings))
        return SearchSnapshot(generation, stamps, table, old.index, old.clip)

    async def _rebuild(self, stamps: Stamps) -> SearchSnapshot | None:
        self._generation += 1
        key = self.spec.key if self.encoder is not None else None
        old = self._snap
        try:
            if old is not None and stamps.index == old.stamps.index:  # the catalog moved, the vectors did not
                try:
                    snap = await off_loop(self._updated, old, stamps, self._generation)
                except BUILD_ERRORS as exc:  # read whole below, which reports what still fails
                    log.warning("gallery table update failed, reading it whole: %s: %s", type(exc).__name__, exc)
                    snap = None
                if snap is not None:
                    self.table_updates += 1
                    self._carry_vocabulary(old, snap)
                    self._snap, self._failed = snap, None
                    return snap
            folder, fresh, read = await self._clip_source(stamps)
            try:
                snap = await off_loop(build_snapshot, self.catalog, folder, key, read, self._generation)
                self.table_reads += 1
            except BUILD_ERRORS as exc:
                if fresh is None:
                    raise
                follower = self.followers["clip"]
                follower.refuse(fresh, exc)  # a published file that will not load: keep the old one
                folder, fresh, read = self._clip_dir, None, replace(stamps, index=follower.digest or 0)
                snap = await off_loop(build_snapshot, self.catalog, folder, key, read, self._generation)
                self.table_reads += 1
            if fresh is not None:
                self._clip_dir = folder
                await off_loop(self.followers["clip"].loaded, fresh)
        except BUILD_ERRORS as exc:
            self._failed = (stamps, f"{type(exc).__name__}: {exc}")
            serving = f"generation {self._snap.generation}" if self._snap else "nothing"
            log.error("search snapshot rebuild failed, still serving %s: %s", serving, self._failed[1])
            return None
        finally:
            self._job = None
        self._carry_vocabulary(old, snap)
        self._snap, self._failed = snap, None
        return snap

    def _pointer(self) -> dict[str, Any] | None:
        try:
            return json.loads((self._data_dir / "vectors" / "current.json").read_text())
        except (OSError, ValueError):
            return None

    def clip_on(self, snap: SearchSnapshot | None = None) -> bool:
        """Whether CLIP ranks (by ``snap``, else the current snapshot, else the index pointer before the first)."""
        snap = snap or self._snap
        if snap is not None:
            return snap.clip
        pointer = self._pointer()
        return self.encoder is not None and pointer is not None and pointer.get("model") == self.spec.key

    def text_model_state(self) -> str:
        return self.dense.describe()

    async def dense_ready(self) -> bool:
        return await self.dense.ready()

    def signals(self, snap: SearchSnapshot | None = None) -> list[str]:
        """The signals a text query is ranked by right now (on ``snap``)."""
        out = ["clip"] if self.clip_on(snap) else []
        if self.dense.on:
            out.append("dense-text")
        return [*out, "full-text"]

    def status(self, snap: SearchSnapshot | None = None) -> dict[str, Any]:
        """What search is doing, in words and numbers (for /health and search responses); reads nothing large."""
        snap = snap or self._snap
        signals = self.signals(snap)
        out: dict[str, Any] = {
            "clip": self.spec.describe(),
            "text_model": self.text_model_state(),
            "mode": "+".join(signals),
            "signals": signals,
        }
        meta = snap.index.meta if snap is not None and snap.index is not None else None
        if snap is None:
            meta = self._pointer()
        if meta:
            out["index"] = {
                "version": meta.get("version"),
                "vectors": meta.get("count"),
                "dims": meta.get("dims"),
                "model": meta.get("model"),
                "written_at": meta.get("written_at"),
            }
        if self.encoder is not None and not self.clip_on(snap):
            out["clip"] += "; no index for this model yet: run `imagesvc index` (no CLIP ranking until then)"
        out["gallery_table"] = {
            "illustrations": len(snap.table) if snap is not None else 0,
            "read_whole": self.table_reads,
            "updated_by_book": self.table_updates,
        }
        if self.text_model is not None:
            words = _done(snap.derived.get("vocabulary")) if snap is not None else None
            out["vocabulary"] = {
                "words": len(words.words) if words is not None else 0,
                "read_whole": self.vocabulary_reads,
                "updated_by_book": self.vocabulary_updates,
                "texts_read": words.read if words is not None else 0,
            }
        if self._failed is not None:
            out["rebuild_error"] = self._failed[1]
        if self.dense.model is not None:
            out["text_index"] = self.dense.source()
        if (follower := self._clip_follower(read=False)) is not None:
            out["clip_index"] = follower.describe()
        return out

    # -- queries ---------------------------------------------------------------------------------------------------

    def _text_vector(self, text: str) -> np.ndarray:
        encoder = self.encoder
        assert encoder is not None
        text = " ".join(text.split())  # the key is the text encoded: the model reads case, so the key keeps it
        return self.cache.vector(text, lambda: encoder.encode_text([text])[0])

    def _run(self, snap: SearchSnapshot, q: Query, text_scores: TextScores | None) -> Ranked:
        table, vector = snap.table, None
        if q.like is not None:
            if table.row_of(q.like) is None or not table.live[table.row_of(q.like)]:
                raise NotFound(
                    f"No illustration has the id {q.like!r}.",
                    details={"id": q.like},
                    recovery=["Take illustration ids from GET /gallery results."],
                )
            vector = snap.vector_of(q.like)
            if vector is None:
                raise NotFound(
                    f"Illustration {q.like!r} has no image embedding, so nothing can be ranked by likeness to it.",
                    recovery=["Run `imagesvc index` with CLIP weights configured (docs/search.md)."],
                    details={"id": q.like},
                )
        elif q.text and snap.clip:
            vector = self._text_vector(q.text)
        return rank(table, q, snap.matrix if vector is not None else None, vector, text_scores)

    def _dense_rows(self, table: GalleryTable, ids: list[str]) -> np.ndarray:
        """The table row of each illustration of the dense index (-1: one the table lacks), kept while the table and
        the index stay the ones it was worked out for."""
        known = self._rows_of_dense
        if known is not None and known[0] is table and known[1] is ids:
            return known[2]
        followed = table.rows_following(known[0], known[2], ids) if known is not None and known[1] is ids else None
        rows = followed if followed is not None else table.rows_of(ids, len(ids))
        self._rows_of_dense = (table, ids, rows)
        return rows

    async def excluded(self, terms: tuple[str, ...]) -> frozenset[str]:
        """Ids of illustrations whose text matches any of ``terms`` as keywords (negative query terms)."""

        def read(catalog: Any) -> frozenset[str]:
            out: set[str] = set()
            for term in terms:
                out |= matching_ids(catalog, term)
            return frozenset(out)

        return await self.catalog.gate.run(read, self.catalog)  # type: ignore[no-any-return]

    async def vocabulary(self, snap: SearchSnapshot) -> Vocabulary:
        """The spelling vocabulary for ``snap``: carried over from the snapshot before it (``_carry_vocabulary``),
        else read whole in a worker thread on first use."""
        return await snap.derive("vocabulary", self._vocabulary)

    def _vocabulary(self) -> Vocabulary:
        """Every live illustration's words, read whole (blocking: a worker thread)."""
        with reader(self.catalog) as source:
            seq = changes_seq(source)  # read before the texts: a write after it is read again by the next update
            vocabulary = Vocabulary(_book_texts(text_rows(source)))
        vocabulary.seq = seq
        self.vocabulary_reads += 1
        return vocabulary

    def _follow_books(self, vocabulary: Vocabulary) -> Vocabulary:
        """``vocabulary`` with the books written since it was read read again, and only those (blocking: a worker
        thread); read whole instead past ``MAX_BOOKS`` changed books, or when the change numbers went back."""
        with reader(self.catalog) as source:
            seq = changes_seq(source)
            books = changed_books(source, vocabulary.seq) if seq >= vocabulary.seq else None
            rows = text_rows(source, books) if books else []
        if books is None:
            return self._vocabulary()
        if not books:
            return vocabulary
        vocabulary.replace(books, _book_texts(rows))
        vocabulary.seq = seq
        self.vocabulary_updates += 1
        return vocabulary

    def _carry_vocabulary(self, old: SearchSnapshot | None, new: SearchSnapshot) -> None:
        """Give ``new`` the vocabulary of ``old`` (read, or being read), brought up to date book by book in a
        worker thread from now on: a catalog change costs the words of the books it touched, not the library's.
        The vocabulary is moved, not copied (a search still ranking on ``old`` may see the newer words: harmless).
        Without one, ``new`` reads its own whole on its first text query."""
        job = old.derived.get("vocabulary") if old is not None else None
        if job is None or (job.done() and (job.cancelled() or job.exception() is not None)):
            return

        async def carried() -> Vocabulary:
            return await off_loop(self._follow_books, await asyncio.shield(job))

        task = new.derived["vocabulary"] = asyncio.ensure_future(carried())
        task.add_done_callback(_seen)  # a failure is the next text query's to report (it reads the whole again)

    def _spelt_right(self, text: str) -> Callable[[str], bool]:
        """Whether a word of ``text`` is spelt right: an English dictionary word, or, in a query of two or more words
        a Latin or Hebrew dictionary knows, one of those ("ligone" is a Latin hoe, not a misspelt "line")."""
        assert self.text_model is not None
        is_word = self.text_model.is_common_word
        found = self.text_model.gloss(text)
        if found is None or len(found.known) < 2:  # a lone word ("serpant") is corrected as any other: no context
            return is_word
        return lambda word: word.casefold() in found.known or is_word(word)

    def _own_connections(self) -> bool:
        """Whether keyword queries can read on connections of their own (a SQLite file, or PostgreSQL's pool)."""
        path = getattr(self.catalog, "path", None)
        if getattr(self.catalog, "dialect", "sqlite") == "postgres":
            return True
        return path is not None and str(path) != ":memory:" and Path(path).exists()

    @contextmanager
    def _keyword_source(self) -> Iterator[Any]:
        """A catalog for a worker thread's keyword query: PostgreSQL's pool, or a SQLite connection of the engine's
        own, reused (opening one per query cost more than many queries)."""
        if getattr(self.catalog, "dialect", "sqlite") == "postgres":
            yield self.catalog
            return
        try:
            source = self._readers.get_nowait()
        except queue.Empty:
            source = Catalog(self.catalog.path)
        try:
            yield source
        finally:
            self._readers.put(source)

    @staticmethod
    def _hit_rows(table: GalleryTable, hits: KeywordHits, source: Any) -> tuple[np.ndarray, np.ndarray]:
        """``hits`` as (table rows, scores), without the hits the table does not hold (written since it was read)."""
        if not len(hits):
            return np.zeros(0, np.int64), np.zeros(0)
        if hits.rowids is not None and table.rowid is not None and table.exact and hits.seq == table.seq:
            rows = table.rows_of_rowids(hits.rowids)  # the same illustrations as when the table was read
        else:
            ids = hits.ids if hits.ids is not None else ids_of_rowids(source, hits.rowids)
            rows = table.rows_of(ids, len(ids))
        keep = rows >= 0
        return rows[keep], hits.scores[keep]

    async def search(self, q: Query) -> Scored:
        """Rank ``q`` on one snapshot: the page, its per-signal scores and the signals used. ``NotFound`` for an
        unknown ``like``."""
        # Scans, keyword queries, model and numpy work go to worker threads.
        snap = await self.snapshot()
        if not (q.text and q.like is None):
            ranked = await off_loop(self._run, snap, q, None)
            return Scored(snap.table, ranked, snap.generation, signals=self.signals(snap))
        use_dense = await self.dense_ready()
        fixes: dict[str, str] = {}
        if use_dense and self.text_model is not None:  # spelling needs the model's dictionary
            vocabulary = await self.vocabulary(snap)
            text, fixes = await off_loop(  # in the thread: the first Latin query reads the dictionary (~1 s)
                lambda text: vocabulary.correct(text, self._spelt_right(text)), q.text
            )
            q = replace(q, text=text)
        text = q.text
        assert text is not None
        cached = self.keywords.peek(snap.generation, text)
        # on the loop's connection when there is no other (a SQLite catalog in memory)
        early = (
            None
            if cached is not None or self._own_connections()
            else await self.catalog.gate.run(keyword_hits, self.catalog, text)
        )

        def matches() -> tuple[np.ndarray, np.ndarray]:
            if early is None:
                with self._keyword_source() as source:
                    return self._hit_rows(snap.table, keyword_hits(source, text), source)
            return self._hit_rows(snap.table, early, self.catalog)

        def work() -> tuple[Ranked, dict[str, float], dict[str, float], Gloss | None]:
            rows, scores = cached if cached is not None else self.keywords.get(snap.generation, text, matches)
            found = self.dense.scores(text) if use_dense else None
            fused = None
            if found:
                table = snap.table
                fused = fuse_rows(len(table), self._dense_rows(table, found[0]), found[1], rows, scores)
                ranked = self._run(snap, q, (fused.rows, fused.scores))
            else:
                ranked = self._run(snap, q, (rows, scores))  # keyword only: the scores as they are
            # each signal's score of the page's results only (a dict of every match would cost more than the ranking)
            by_row = dict(zip(rows.tolist(), scores.tolist(), strict=True)) if ranked.rows else {}
            shown = {snap.table.ids[r]: by_row[r] for r in ranked.rows if r in by_row}
            if fused is None:
                return ranked, {}, shown, None
            dense = {snap.table.ids[r]: c for r in ranked.rows if (c := fused.dense_of(r)) is not None}
            read = self.text_model.gloss(text) if self.text_model is not None else None  # as the vector read it
            return ranked, dense, shown, read

        ranked, dense, fts, read = await off_loop(work)
        signals = [s for s in self.signals(snap) if s != "dense-text" or use_dense]
        return Scored(snap.table, ranked, snap.generation, fts, dense, signals, fixes, read)


def _book_texts(rows: list[dict[str, Any]]) -> Iterator[tuple[str, str]]:
    return ((row["book_id"], illustration_text(row)) for row in rows)


def _seen(task: asyncio.Future[Any]) -> None:
    """Mark ``task``'s outcome as looked at (asyncio logs a failure no one awaited)."""
    if not task.cancelled():
        task.exception()


def _done(job: asyncio.Future[Any] | None) -> Any:
    """``job``'s result when it finished well, else None."""
    if job is None or not job.done() or job.cancelled() or job.exception() is not None:
        return None
    return job.result()


_REBUILD = ["Run `imagesvc index` again to rewrite the vector index; the node picks it up on the next request."]
