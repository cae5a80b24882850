"""Dense text search: each illustration's words embedded by a sentence-embedding model, offline, kept as a vector index.

The model is chosen by ``IMAGESVC_TEXT_MODEL`` (``text_models.TextModel``). The index lives in
``DATA_DIR/textvectors/`` in the layout of ``vectors.py``, tagged with the model's identity and version; its hashes
are of the model key and the embedded text, so an edited description is embedded again, and nothing else.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from imagesvc.errors import Unavailable
from imagesvc.search import text_models
from imagesvc.search.e5_model import models_root
from imagesvc.search.products import MeanCodes, dot
from imagesvc.search.text_models import TextModel, shared_model
from imagesvc.search.vectors import VectorIndex, indexed_model, load_index, save_index

__all__ = [
    "TEXT_FOLDER",
    "OtherModel",
    "Passages",
    "StaleWork",
    "TextIndexSummary",
    "dot",
    "highest",
    "illustration_text",
    "passages",
    "run_text_index",
    "sync_text_index",
    "text_rows",
]

log = logging.getLogger("imagesvc.search.dense")
TEXT_FOLDER = "textvectors"


def _terms(row: dict[str, Any]) -> list[str]:
    out = []
    for name in ("subjects", "figures", "symbols"):
        values = row.get(name) or []
        out += json.loads(values or "[]") if isinstance(values, str) else values
    return [str(v) for v in out]


def illustration_text(row: dict[str, Any]) -> str:
    """The words a searcher may mean: type, description, museum description, subjects, figures and symbols."""
    parts = [row.get("type") or "", row.get("description") or "", row.get("museum_description") or ""]
    return ". ".join(p.strip().rstrip(".") for p in [*parts, ", ".join(_terms(row))] if p and p.strip())


def passages(row: dict[str, Any]) -> list[str]:
    """What is embedded for one illustration, each on its own: the description, the museum description, and the type
    with the subjects, figures and symbols. An illustration scores the best cosine of its passages, so a short query
    meets the passage that speaks of it instead of an average of everything (docs/search.md)."""
    terms = ", ".join([row.get("type") or "", *_terms(row)]).strip(", ")
    out = [row.get("description") or "", row.get("museum_description") or "", terms]
    return [p.strip() for p in out if p and p.strip()] or [""]


def text_hash(key: str, text: str) -> str:
    return hashlib.sha256(f"{key}\n{text}".encode()).hexdigest()[:32]


_BOOKS_AT_ONCE = 500  # book ids in one IN (...): SQLite bounds a statement's parameters


def text_rows(catalog: Any, books: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Live illustrations (of ``books`` only, when given: sorted ids) with their book and the fields
    ``illustration_text`` reads, in catalog order (a catalog read: call it on the thread that owns the connection)."""
    sql = (
        "SELECT i.id, i.book_id, i.type, i.description, i.museum_description, i.subjects, i.figures, i.symbols"
        " FROM illustrations i JOIN books b ON b.id = i.book_id WHERE i.removed = 0 AND b.withdrawn = 0{}"
        " ORDER BY i.book_id, i.page_number, i.idx"
    )
    if books is None:
        return catalog.query_all(sql.format(""))
    rows: list[dict[str, Any]] = []
    for start in range(0, len(books), _BOOKS_AT_ONCE):
        chunk = books[start : start + _BOOKS_AT_ONCE]
        rows += catalog.query_all(sql.format(" AND i.book_id IN ({})".format(",".join("?" * len(chunk)))), chunk)
    return rows


@dataclass
class TextIndexSummary:
    version: int
    vectors: int
    embedded: int
    kept: int
    dropped: int
    seconds: float
    model: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        return (
            f"text index v{self.version}: {self.vectors} vectors ({self.embedded} embedded, {self.kept} kept, "
            f"{self.dropped} dropped) in {self.seconds:.1f}s, {self.model}"
        )


def first_columns(index: VectorIndex, key: str, dims: int) -> VectorIndex | None:
    """``index`` as a node running model ``key`` (``dims`` wide) may rank with it: itself when it is that model's;
    the first model's columns when it is a pair's whose first model is ``key`` (``e5+minilm`` served by a node that
    fell back to ``e5``: those columns are e5's own vectors); else ``None``. Nothing is embedded into such a view."""
    if index.model_key == key:
        return index
    if not index.model_key.startswith(f"{key} + ") or index.dims <= dims:
        return None
    columns = np.ascontiguousarray(index.embeddings[:, :dims])
    return VectorIndex(index.ids, index.hashes, columns, key, index.version, index.meta)


class OtherModel(Unavailable):
    """The text index on disk was embedded by another model than this node's: ranking with it would compare vectors
    of two models, and re-embedding it all is a job for ``imagesvc index``, not for a serving worker."""


class StaleWork(Exception):
    """The search state this work was for has been replaced (its snapshot closed): the work stopped unfinished."""


STALE_CHECK_PASSAGES = 128  # passages embedded between two checks that the work is still wanted (~1-5 s)


def sync_text_index(
    data_dir: Path,
    rows: list[dict[str, Any]],
    model: TextModel,
    *,
    full: bool = False,
    schema_version: int = 0,
    replace_other: bool = True,
    still_wanted: Callable[[], bool] = lambda: True,
) -> tuple[VectorIndex, TextIndexSummary]:
    """Bring the text index in ``data_dir`` up to date with ``rows`` (live illustrations with their text fields);
    embeds only new or changed illustrations. The index has one row per passage, its ``ids`` naming the illustration
    (so an id repeats). An index of another model is embedded again from scratch, or with ``replace_other=False``
    left alone (``OtherModel``). Returns the index and what was done. Blocking: call it in a thread.

    ``still_wanted()`` is asked between batches and before saving; False stops the work with ``StaleWork``."""
    started = time.perf_counter()
    key = model.key
    old = None if full else load_index(data_dir, TEXT_FOLDER)
    if old is not None and old.model_key != key:
        if not replace_other and len(old.ids):
            raise OtherModel(
                f"the text index was embedded by {old.model_key}, and this node runs {key}",
                recovery=["Run `imagesvc index` to embed every illustration with this node's model (docs/search.md)."],
            )
        old = None
    wanted = [(r["id"], p) for r in rows for p in [passages(r)]]
    hashes = {iid: text_hash(key, "\n".join(p)) for iid, p in wanted}
    previous: dict[str, tuple[str, list[int]]] = {}
    if old is not None:
        for n, (iid, h) in enumerate(zip(old.ids, old.hashes, strict=True)):
            previous.setdefault(iid, (h, []))[1].append(n)
    if old is not None and list(previous) == list(hashes) and all(previous[i][0] == h for i, h in hashes.items()):
        return old, TextIndexSummary(old.version, len(hashes), 0, len(hashes), 0, time.perf_counter() - started, key)
    todo = [(iid, p) for iid, p in wanted if previous.get(iid, ("", []))[0] != hashes[iid]]
    flat = [text for _, p in todo for text in p]
    dims = model.info.dims if model.info else 0
    chunks = []
    for start in range(0, len(flat), STALE_CHECK_PASSAGES):
        if not still_wanted():
            raise StaleWork(f"text index of {data_dir}: its search state was replaced")
        chunks.append(model.encode(flat[start : start + STALE_CHECK_PASSAGES]))
    vectors = np.concatenate(chunks) if chunks else np.zeros((0, dims), np.float32)
    fresh: dict[str, np.ndarray] = {}
    at = 0
    for iid, p in todo:
        fresh[iid], at = vectors[at : at + len(p)], at + len(p)
    out_ids: list[str] = []
    blocks: list[np.ndarray] = []
    for iid, _ in wanted:
        block = fresh[iid] if iid in fresh else old.embeddings[previous[iid][1]]  # type: ignore[union-attr]
        blocks.append(block)
        out_ids += [iid] * len(block)
    matrix = np.concatenate(blocks).astype(np.float32) if blocks else np.zeros((0, dims), np.float32)
    index = VectorIndex(out_ids, [hashes[i] for i in out_ids], matrix, key)
    if not still_wanted():
        raise StaleWork(f"text index of {data_dir}: its search state was replaced")
    try:
        version = save_index(data_dir, index, schema_version, TEXT_FOLDER)
    except OSError as exc:  # a read-only data dir (a snapshot follower): keep the index in memory only
        log.warning("text index kept in memory only: %s", exc)
        version = 0
    summary = TextIndexSummary(
        version,
        len(wanted),
        len(fresh),
        len(wanted) - len(fresh),
        sum(1 for i in previous if i not in hashes),
        time.perf_counter() - started,
        key,
    )
    log.info("%s", summary.line())
    return index, summary


PREFILTER_FROM = 50_000  # illustrations from which a query is first scored against each one's mean passage
CANDIDATES = 4_096  # illustrations whose passages are then scored one by one


def highest(scores: np.ndarray, count: int) -> np.ndarray:
    """The rows of the ``count`` highest ``scores``, in row order (more where several tie with the last; NaN never
    among them). One partition of the values and one comparison: ``argpartition`` moved indices as well, then a
    sort put them in order (2.2 ms of CPU at 200,000 rows against 1.3 here, docs/benchmarks.md)."""
    missing = np.isnan(scores)
    finite = len(scores) - int(np.count_nonzero(missing))
    if count >= finite:
        return np.flatnonzero(~missing)
    if count <= 0:
        return np.zeros(0, np.int64)
    last = np.partition(scores, finite - count)[finite - count]  # NaN is placed after every number
    return np.flatnonzero(scores >= last)


Means = MeanCodes | np.ndarray  # one byte a value (the service), or float32 (``Passages.of(codes=False)``)


def _mean_product(means: Means, vector: np.ndarray) -> np.ndarray:
    return means.scores(vector) if isinstance(means, MeanCodes) else dot(means, vector)


@dataclass(frozen=True)
class Passages:
    """Which illustration each row of a text index belongs to: ``ids`` in index order, ``inverse`` row -> id. From
    ``PREFILTER_FROM`` illustrations on, also each illustration's first row, row count and mean passage vector,
    kept in one byte a value (``MeanCodes``)."""

    ids: list[str]
    inverse: np.ndarray
    starts: np.ndarray | None = None
    counts: np.ndarray | None = None
    means: Means | None = None
    split: int = 0  # with two models' columns (``e5+minilm``): ``means`` the first's, ``second_means`` the other's
    second_means: Means | None = None

    @classmethod
    def of(
        cls,
        index: VectorIndex,
        prefilter_from: int | None = None,
        split: int = 0,
        codes: bool = True,
    ) -> Passages:
        """``prefilter_from`` defaults to ``PREFILTER_FROM``, as it is when called. ``codes=False`` keeps the means
        in float32 (benchmarks that compare against them)."""
        where: dict[str, int] = {}
        inverse = np.fromiter((where.setdefault(i, len(where)) for i in index.ids), np.int64, len(index.ids))
        if len(where) < max(1, PREFILTER_FROM if prefilter_from is None else prefilter_from):
            return cls(list(where), inverse)
        starts = np.flatnonzero(np.r_[True, inverse[1:] != inverse[:-1]])
        if len(starts) != len(where):  # an illustration's rows are not contiguous: no prefilter
            return cls(list(where), inverse)
        counts = np.diff(np.r_[starts, len(inverse)])
        means = (np.add.reduceat(index.embeddings, starts, axis=0) / counts[:, None]).astype(np.float32)
        store: Callable[[np.ndarray], Means] = MeanCodes if codes else np.ascontiguousarray
        if split:  # two contiguous blocks: a query part that is zero in one model's columns reads only the other's
            first, second = means[:, :split], means[:, split:]
            del means  # the float32 means go as each block is kept
            return cls(list(where), inverse, starts, counts, store(first), split, store(second))
        return cls(list(where), inverse, starts, counts, store(means))

    def _mean_scores(self, vector: np.ndarray) -> np.ndarray:
        """Each illustration's mean passage vector with ``vector``."""
        assert self.means is not None
        if not self.split or self.second_means is None:
            return _mean_product(self.means, vector)
        head, tail = vector[: self.split], vector[self.split :]
        if not tail.any():
            return _mean_product(self.means, np.ascontiguousarray(head))
        if not head.any():
            return _mean_product(self.second_means, np.ascontiguousarray(tail))
        return _mean_product(self.means, np.ascontiguousarray(head)) + _mean_product(
            self.second_means, np.ascontiguousarray(tail)
        )

    def best(self, scores: np.ndarray) -> np.ndarray:
        """Per illustration, the best of its passages' ``scores``."""
        out = np.full(len(self.ids), -np.inf, np.float32)
        np.maximum.at(out, self.inverse, scores.astype(np.float32))
        return out

    def score(self, embeddings: np.ndarray, vector: np.ndarray) -> np.ndarray:
        """Per illustration, the best cosine of its passages with ``vector``. On a large index (``means`` set) only
        the ``CANDIDATES`` illustrations whose mean passage scores highest get their best passage; the others keep
        that mean, read from its one-byte codes: never above their best by more than the codes' error
        (``MeanCodes.error``, about 1e-4 in practice and 0.01 at most for a unit query). One product with a
        quarter of the means' float32 bytes and the candidates' rows instead of every passage (docs/benchmarks.md),
        at the risk of missing an illustration with one close passage and two far ones."""
        return self.score_parts(embeddings, [vector])[0]

    def dense(self, embeddings: np.ndarray, vector: np.ndarray, info: text_models.ModelInfo) -> np.ndarray:
        """Per illustration, the dense score of a query's ``vector`` on the common scale (``text_models._SCALE``);
        with both models' parts in it, each one's best passage, then their weighted mean (``ModelInfo.common``)."""
        if info.split and vector[info.split :].any():
            if not vector[: info.split].any():  # read by the second model alone (an English query, ``e5+minilm``)
                return info.common(None, self.score(embeddings, vector))
            first, second = vector.copy(), vector.copy()
            first[info.split :], second[: info.split] = 0, 0
            return info.common(*self.score_parts(embeddings, [first, second]))
        return info.common(self.score(embeddings, vector))

    def score_parts(self, embeddings: np.ndarray, vectors: list[np.ndarray]) -> list[np.ndarray]:
        """``score`` for several query vectors of the same rows (two models' parts of one query, each zero outside
        its own columns): each one's best passage per illustration. On a large index the candidates are chosen once,
        by the sum of their means' products."""
        if self.means is None or self.starts is None or self.counts is None:
            return [self.best(dot(embeddings, vector)) for vector in vectors]
        parts = [self._mean_scores(vector) for vector in vectors]
        top = highest(parts[0] if len(parts) == 1 else np.sum(parts, axis=0), CANDIDATES)
        starts, counts = self.starts[top], self.counts[top]
        offsets = np.r_[0, np.cumsum(counts)[:-1]]
        rows = np.repeat(starts - offsets, counts) + np.arange(int(counts.sum()))
        for part, vector in zip(parts, vectors, strict=True):
            if len(top):
                part[top] = np.maximum.reduceat(self._rows_product(embeddings, vector, rows), offsets)
        return parts

    def _rows_product(self, embeddings: np.ndarray, vector: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """``rows`` of ``embeddings`` with ``vector``. Two models' columns of equal width (``e5+minilm``) are read as
        twice the rows of half the width, without a copy, so a vector in one model's columns reads only those (half
        the bytes of the candidates' passages); else whole rows."""
        half = self.split
        if half and embeddings.ndim == 2 and embeddings.shape[1] == 2 * half and embeddings.flags.c_contiguous:
            head, tail = vector[:half], vector[half:]
            halves = embeddings.reshape(-1, half)  # row r is rows 2r (first model) and 2r + 1 (second)
            if not tail.any():
                return dot(halves, np.ascontiguousarray(head), 2 * rows)
            if not head.any():
                return dot(halves, np.ascontiguousarray(tail), 2 * rows + 1)
        return dot(embeddings, vector, rows)


async def run_text_index(settings: Any, catalog: Any, *, full: bool = False) -> TextIndexSummary | None:
    """``imagesvc index``'s text part: embed new and changed illustrations' text (``None`` with the model off)."""
    if settings.text_model == "off":
        return None
    import asyncio
    import os

    rows = text_rows(catalog)
    threads = os.cpu_count() or 1  # a job of its own: every core
    model = shared_model(settings.text_model, threads, bulk=True, models=models_root(settings.model_dir))
    if model.info is None:  # said at start-up and by `imagesvc doctor`; search stays keyword-only
        log.warning("text index not built: %s", model.note)
        return None
    wanted = text_models.model_info(settings.text_model)
    current = indexed_model(Path(settings.data_dir), TEXT_FOLDER)  # its pointer: the index itself is read once, below
    if model.info.name != settings.text_model and current == wanted.key:
        # a fallback: re-embedding with it would replace the configured model's index for every node that reads it
        raise Unavailable(
            f"the text index is {wanted.key}'s, as configured, and this node cannot run it ({model.note}); "
            "it was left as it is",
            recovery=[f"Install what is missing here, then run `imagesvc index` ({model.note})."],
        )
    await asyncio.to_thread(model.load)
    _, summary = await asyncio.to_thread(sync_text_index, Path(settings.data_dir), rows, model, full=full)
    return summary
