"""The dense text index and the query reading around it: incremental embedding, negative terms, spelling, laziness."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from imagesvc.catalog import Catalog
from imagesvc.search.dense import TEXT_FOLDER, Passages, sync_text_index, text_rows
from imagesvc.search.fusion import parse_query
from imagesvc.search.spelling import Vocabulary
from imagesvc.search.text_models import shared_model
from imagesvc.search.vectors import load_index
from tests.library import copy_library

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def data(demo_library: dict[str, Any], tmp_path: Path) -> Path:
    return copy_library(demo_library["data"], tmp_path / "data")


def test_text_index_embeds_only_new_or_changed_illustrations(data: Path) -> None:
    catalog = Catalog(data / "catalog.sqlite3")
    try:
        rows = text_rows(catalog)
    finally:
        catalog.close()
    model = shared_model()
    index, first = sync_text_index(data, rows, model)
    assert (first.embedded, first.kept, first.vectors) == (len(rows), 0, len(rows))
    assert index.dims == 768  # e5's columns, then MiniLM's, each vector normalised on its own
    for block in (index.embeddings[:, :384], index.embeddings[:, 384:]):
        assert np.allclose(np.linalg.norm(block, axis=1), 1.0, atol=1e-4)
    groups = Passages.of(index)
    assert groups.ids == [r["id"] for r in rows]
    # nothing changed: nothing embedded, the index on disk is the same version
    _, second = sync_text_index(data, rows, model)
    assert (second.embedded, second.kept, second.version) == (0, len(rows), first.version)
    # one description edited, one illustration gone: exactly one embedded, one dropped
    edited = [dict(r) for r in rows[1:]]
    edited[0]["description"] = "A serpent coiled around a furnace, drawn again by a later hand."
    third_index, third = sync_text_index(data, edited, model)
    assert (third.embedded, third.kept, third.dropped) == (1, len(rows) - 2, 1)
    assert rows[0]["id"] not in Passages.of(third_index).ids
    unchanged = rows[2]["id"]
    old_rows = np.flatnonzero(np.array(index.ids) == unchanged)
    new_rows = np.flatnonzero(np.array(third_index.ids) == unchanged)
    assert np.array_equal(index.embeddings[old_rows], third_index.embeddings[new_rows])
    on_disk = load_index(data, TEXT_FOLDER)
    assert on_disk is not None and on_disk.version == third.version and on_disk.ids == third_index.ids


def test_a_paraphrase_is_nearest_to_the_passage_it_paraphrases(data: Path) -> None:
    catalog = Catalog(data / "catalog.sqlite3")
    try:
        rows = text_rows(catalog)
    finally:
        catalog.close()
    model = shared_model()
    index, _ = sync_text_index(data, rows, model)
    groups = Passages.of(index)
    best = groups.best(index.embeddings @ model.query("snake eating itself"))
    top = groups.ids[int(np.argmax(best))]
    assert "serpent biting its own tail" in next(r["description"] for r in rows if r["id"] == top)


@pytest.mark.parametrize(
    ("query", "exclude", "positive", "negative"),
    [
        ("furnace -bellows", None, "furnace", ("bellows",)),
        ('plan -"folding map" -mine', None, "plan", ("folding map", "mine")),
        ("bucket-chain water wheel", None, "bucket-chain water wheel", ()),
        ("-map", "sun, Moon", None, ("map", "sun", "moon")),
        ("stars", '"fixed stars" pole', "stars", ("fixed stars", "pole")),
        ("- lonely dash", None, "- lonely dash", ()),
    ],
)
def test_negative_terms_are_read_from_the_query_and_exclude(
    query: str, exclude: str | None, positive: str | None, negative: tuple[str, ...]
) -> None:
    parsed = parse_query(query, exclude)
    assert parsed.positive == positive and parsed.negative == negative


def test_spelling_fixes_misspellings_but_leaves_real_words_alone() -> None:
    model = shared_model()
    texts = ["An alembic on a cucurbit", "a serpent biting its own tail", "a furnace with bellows"]
    vocabulary = Vocabulary(("book", text) for text in texts)
    assert vocabulary.correct("alembik and serpant", model.is_common_word) == (
        "alembic and serpent",
        {"alembik": "alembic", "serpant": "serpent"},
    )
    # "ovens" is no word of this library, but a word all the same: it must not become "opens" or anything else
    assert vocabulary.correct("ovens", model.is_common_word) == ("ovens", {})


def test_importing_the_service_does_not_import_the_models() -> None:
    """Code and tests that never embed text must not pay for torch and transformers (seconds of import)."""
    code = (
        "import sys, imagesvc.app, imagesvc.tools.gallery, imagesvc.search.engine, imagesvc.search.dense;"
        "heavy = [m for m in ('torch', 'transformers', 'sentence_transformers', 'open_clip') if m in sys.modules];"
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
