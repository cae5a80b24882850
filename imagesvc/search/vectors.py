"""The vector index: an embedding matrix with its id and content-hash lists, stored as atomic versioned files.

Layout under ``DATA_DIR/vectors/``: ``index-<version>.npz`` (``ids``, ``hashes``, ``embeddings`` float32, one
normalised row per illustration) and ``current.json`` naming the live version, its model and the catalog schema it was
built against. A writer finishes the new ``.npz`` before it swaps ``current.json`` with ``os.replace``, so a reader
sees the old index or the new one, never half of either.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["VectorIndex", "indexed_model", "load_index", "save_index", "top_k"]

KEEP_VERSIONS = 2  # the live index and the one before it (a reader may still be loading it)


@dataclass
class VectorIndex:
    """Rows of ``embeddings`` belong to ``ids`` in order; ``hashes`` are the content hashes they were embedded from."""

    ids: list[str]
    hashes: list[str]
    embeddings: np.ndarray
    model_key: str
    version: int = 0
    meta: dict[str, Any] = field(default_factory=dict)
    _row: dict[str, int] | None = None

    @property
    def dims(self) -> int:
        return int(self.embeddings.shape[1]) if self.embeddings.ndim == 2 else 0

    def row_of(self, illustration_id: str) -> int | None:
        if self._row is None:
            self._row = {iid: i for i, iid in enumerate(self.ids)}
        return self._row.get(illustration_id)

    @classmethod
    def empty(cls, model_key: str, dims: int = 0) -> VectorIndex:
        return cls([], [], np.zeros((0, dims), np.float32), model_key)


def _folder(data_dir: Path, name: str = "vectors") -> Path:
    return Path(data_dir) / name


def save_index(data_dir: Path, index: VectorIndex, schema_version: int, name: str = "vectors") -> int:
    """Write ``index`` as the next version in folder ``name`` (``textvectors``: the dense text index) and make it
    current; returns the version number."""
    folder = _folder(data_dir, name)
    folder.mkdir(exist_ok=True)  # never the data dir itself: a snapshot folder removed under a writer stays removed
    current = _read_current(folder)
    version = (current or {}).get("version", 0) + 1
    name = f"index-{version}.npz"
    tmp = folder / f".{name}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        np.savez(
            f,
            ids=np.array(index.ids, dtype=str),
            hashes=np.array(index.hashes, dtype=str),
            embeddings=np.ascontiguousarray(index.embeddings, dtype=np.float32),
        )
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / name)
    pointer = {
        "version": version,
        "file": name,
        "model": index.model_key,
        "count": len(index.ids),
        "dims": index.dims,
        "catalog_schema": schema_version,
        "written_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
    }
    tmp_pointer = folder / f".current.{os.getpid()}.tmp"
    tmp_pointer.write_text(json.dumps(pointer, indent=2))
    os.replace(tmp_pointer, folder / "current.json")
    for old in folder.glob("index-*.npz"):
        number = int(old.stem.split("-")[1])
        if number <= version - KEEP_VERSIONS:
            old.unlink(missing_ok=True)
    index.version, index.meta = version, pointer
    return version


def _read_current(folder: Path) -> dict[str, Any] | None:
    try:
        return json.loads((folder / "current.json").read_text())
    except FileNotFoundError:
        return None


def indexed_model(data_dir: Path, name: str = "vectors") -> str | None:
    """The model key the current index in folder ``name`` was embedded by (``current.json`` alone: no array is
    read), or ``None`` without one or with an unreadable pointer."""
    try:
        pointer = _read_current(_folder(data_dir, name))
    except (OSError, ValueError):
        return None
    model = pointer.get("model") if isinstance(pointer, dict) else None
    return model if isinstance(model, str) else None


def load_index(data_dir: Path, name: str = "vectors") -> VectorIndex | None:
    """The current index in folder ``name``, or ``None`` when ``imagesvc index`` has never run here."""
    folder = _folder(data_dir, name)
    pointer = _read_current(folder)
    if pointer is None:
        return None
    # Our own file object: np.load leaves the file it opened itself open when the archive turns out corrupt.
    with open(folder / pointer["file"], "rb") as f, np.load(f, allow_pickle=False) as data:
        embeddings = data["embeddings"].astype(np.float32, copy=False)
        ids = data["ids"].tolist()
        hashes = data["hashes"].tolist()
    if embeddings.size == 0:
        embeddings = embeddings.reshape(0, int(pointer.get("dims") or 0))
    return VectorIndex(ids, hashes, embeddings, pointer["model"], pointer["version"], pointer)


def top_k(matrix: np.ndarray, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The bare reference: rows with the ``k`` highest dot products, best first, and their scores."""
    scores = matrix @ query
    k = min(k, scores.shape[0])
    if k <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    part = np.argpartition(-scores, k - 1)[:k]
    order = part[np.argsort(-scores[part], kind="stable")]
    return order, scores[order]
