"""The demo's shipped text index: written only into a data dir without one and only for the model that embedded it,
and current with the demo library's texts (else `make run` embeds them all again on every fresh clone)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from imagesvc.search.dense import passages, text_hash
from imagesvc.search.text_models import model_info
from imagesvc.search.text_seed import DEMO_SEED, seed_text_index
from imagesvc.search.vectors import VectorIndex, load_index, save_index

ROOT = Path(__file__).resolve().parents[2]


def _seed_key() -> str:
    with np.load(DEMO_SEED) as data:
        return str(data["model"])


def test_the_seed_holds_the_demo_librarys_passages_as_the_default_model_embeds_them() -> None:
    key = _seed_key()
    # the default model as installed (whether or not this CPU can run it): a new version of it needs a new seed
    assert key == model_info("e5+minilm").key, (
        "fixtures/demo_textvectors.npz: python -m imagesvc.search.text_seed DATA_DIR"
    )
    books = json.loads((ROOT / "fixtures" / "demo_books.json").read_text(encoding="utf-8"))["books"]
    found = [i for b in books for p in b["pages"] for i in p.get("illustrations", [])]
    wanted = {text_hash(key, "\n".join(passages(i))) for i in found}
    with np.load(DEMO_SEED) as data:
        assert set(data["hashes"].tolist()) == wanted, "regenerate: python -m imagesvc.search.text_seed DATA_DIR"
        vectors = data["embeddings"]
    assert vectors.dtype == np.float32 and vectors.shape[1] == 768  # e5's 384 columns, then MiniLM's
    for block in (vectors[:, :384], vectors[:, 384:]):  # each model's vector normalised on its own
        assert np.allclose(np.linalg.norm(block, axis=1), 1.0, atol=1e-3)


def test_seeding_writes_only_an_absent_index_of_the_same_model(tmp_path: Path) -> None:
    for name in "abc":
        (tmp_path / name).mkdir()
    assert seed_text_index(tmp_path / "a", "another model (9.9)") == 0
    assert load_index(tmp_path / "a", "textvectors") is None
    rows = seed_text_index(tmp_path / "b", _seed_key())
    index = load_index(tmp_path / "b", "textvectors")
    assert index is not None and rows == len(index.ids) > 0 and index.model_key == _seed_key()
    mine = VectorIndex(["x"], ["h"], np.ones((1, 384), np.float32) / np.sqrt(384), _seed_key())
    save_index(tmp_path / "c", mine, 0, "textvectors")
    assert seed_text_index(tmp_path / "c", _seed_key()) == 0  # an index already there is never replaced
    kept = load_index(tmp_path / "c", "textvectors")
    assert kept is not None and kept.ids == ["x"]
