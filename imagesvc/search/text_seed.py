"""The demo library's text index, embedded once and shipped (``fixtures/demo_textvectors.npz``), so that `make run`
need not embed the same 114 passages on every fresh clone (10 to 17 s of it on a 2-core host).

The seed holds the index's own rows (``ids``, ``hashes``, ``embeddings``) and the key of the model that embedded them.
It is written as the data dir's text index only where there is none yet and the node runs that very model; the
text index's usual sync then keeps every illustration whose hash (model key and text) still matches, and embeds the
rest, so a seed that has gone stale costs time, never a wrong vector. ``python -m imagesvc.search.text_seed DATA_DIR``
writes a new seed from a data dir that ``imagesvc demo`` built with the seed removed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from imagesvc.search.vectors import VectorIndex, load_index, save_index

__all__ = ["DEMO_SEED", "seed_text_index", "write_seed"]

DEMO_SEED = Path(__file__).resolve().parents[2] / "fixtures" / "demo_textvectors.npz"


def seed_text_index(data_dir: Path, model_key: str, seed: Path = DEMO_SEED, folder: str = "textvectors") -> int:
    """Write ``seed`` as the text index of ``data_dir`` when it has none and ``model_key`` embedded the seed;
    returns the rows written (0: nothing done)."""
    if not seed.is_file() or load_index(data_dir, folder) is not None:
        return 0
    with open(seed, "rb") as f, np.load(f, allow_pickle=False) as data:
        if str(data["model"]) != model_key:
            return 0
        index = VectorIndex(
            data["ids"].tolist(), data["hashes"].tolist(), data["embeddings"].astype(np.float32), model_key
        )
    save_index(data_dir, index, 0, folder)
    return len(index.ids)


def write_seed(data_dir: Path, seed: Path = DEMO_SEED, folder: str = "textvectors") -> int:
    """Write the text index of ``data_dir`` as ``seed``; returns its rows."""
    index = load_index(data_dir, folder)
    if index is None:
        raise SystemExit(f"{data_dir} has no text index: run `imagesvc demo` there first")
    with open(seed, "wb") as f:
        np.savez_compressed(
            f,
            ids=np.array(index.ids, dtype=str),
            hashes=np.array(index.hashes, dtype=str),
            embeddings=np.ascontiguousarray(index.embeddings, np.float32),
            model=np.array(index.model_key),
        )
    return len(index.ids)


if __name__ == "__main__":
    print(f"{write_seed(Path(sys.argv[1]))} rows written to {DEMO_SEED}")
