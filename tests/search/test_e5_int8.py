"""e5 with int8 products on ONNX Runtime (imagesvc/search/e5_int8.py), a serving worker's reading, against the
numpy reading in float32: the same vectors, to a cosine of 0.999, for every kind of text a searcher or a description
may hold, alone or padded beside longer ones, from several threads; the graph built once and kept; a damaged or
disagreeing graph built again, a failed build reported, and a worker that cannot use it keeping a reading that
works."""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest

from imagesvc.search import e5, e5_int8, text_models
from imagesvc.search.e5 import E5
from imagesvc.search.e5_int8 import E5Int8
from tests.parts import missing_part
from tests.search.test_e5 import TEXTS

ROOT = Path(__file__).resolve().parents[2]


def _queries() -> list[str]:
    """Every query of the cross-lingual evaluation set, in its eight languages."""
    concepts = json.loads((ROOT / "benchmarks" / "search_eval_languages.json").read_text(encoding="utf-8"))
    return [text for concept in concepts["concepts"] for text in concept["queries"].values()]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if e5_int8.problem() is not None:
        missing_part(f"e5 cannot run on ONNX Runtime here: {e5_int8.problem()}")
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def int8(cache: Path) -> E5Int8:
    return E5Int8(cache=cache)


@pytest.fixture(scope="module")
def reference() -> E5:
    return E5()


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.mark.parametrize("query", [True, False], ids=["query", "passage"])
def test_vectors_agree_with_the_numpy_reading(int8: E5Int8, reference: E5, query: bool) -> None:
    texts = TEXTS + _queries()
    got, want = int8.encode(texts, query), reference.encode(texts, query)
    assert got.shape == want.shape == (len(texts), 384) and got.dtype == np.float32
    assert np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5)
    cosines = _cosines(got, want)
    worst = int(np.argmin(cosines))
    assert cosines.min() >= 0.999, f"{texts[worst]!r}: {cosines.min():.5f}"
    assert np.median(cosines) >= 0.9997


def test_a_text_reads_the_same_beside_any_other(int8: E5Int8) -> None:
    """A product's input is rounded to 8 bits over all of it: were texts batched, a text's vector would depend on
    its neighbours (and on padding). Each reads as it does alone, to the bit, as a query and its gloss, as a long
    description beside a word, in windows."""
    texts = ["a", "draco caudam suam devorans", "the nightly orb grows and shrinks " * 200, "咬住自己尾巴的蛇", ""]
    for query in (True, False):
        together = int8.encode(texts, query)
        alone = np.vstack([int8.encode([text], query) for text in texts])
        assert np.array_equal(together, alone)
        assert np.array_equal(int8.encode(texts[::-1], query), together[::-1])


def test_threads_share_one_session(int8: E5Int8) -> None:
    texts = _queries()[:48]
    want = int8.encode(texts, True)
    got: dict[int, np.ndarray] = {}

    def run(n: int) -> None:
        got[n] = int8.encode(texts, True)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(np.array_equal(got[n], want) for n in range(4))


def test_a_built_graph_is_kept_and_read_again(int8: E5Int8, cache: Path) -> None:
    (kept,) = cache.glob("e5-int8-*.onnx")
    assert kept.name == f"e5-int8-{e5_int8.cache_key()}.onnx"
    before = kept.stat()
    again = E5Int8(cache=cache)
    after = kept.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # read, not built again
    assert again.agreement >= e5_int8.AGREEMENT
    assert _names(cache) == [e5_int8.LOCK, kept.name]  # nothing left aside


def test_a_damaged_graph_in_the_cache_is_built_again(tmp_path: Path, int8: E5Int8, cache: Path) -> None:
    (kept,) = cache.glob("e5-int8-*.onnx")
    damaged = tmp_path / kept.name
    damaged.write_bytes(kept.read_bytes()[: kept.stat().st_size // 2])
    model = E5Int8(cache=tmp_path)
    assert model.agreement >= e5_int8.AGREEMENT
    assert damaged.stat().st_size == kept.stat().st_size
    assert np.array_equal(model.encode(["a lion"], True), int8.encode(["a lion"], True))


def _readings(graph: Path, model: E5, texts: tuple[tuple[str, bool], ...]) -> np.ndarray:
    """``graph``'s mean state of each text (one window each), read on ONNX Runtime as ``E5Int8`` reads."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    out = []
    for text, query in texts:
        _ids, states = model._windows([model.tokens(text, query)])
        out.append(session.run(["y"], {"x": states[None]})[0][0].mean(0))
    return np.stack(out).astype("<f4")


def test_a_swapped_graph_carrying_a_check_of_its_own_making_is_built_again(
    tmp_path: Path, int8: E5Int8, cache: Path, reference: E5
) -> None:
    """A graph whose weights were altered, with the check vectors it carries rewritten to its own reading (which an
    earlier release compared it with, and so served it), reads the check texts otherwise than the model file does
    on numpy, computed at load: it is removed and built again."""
    import onnx

    (kept,) = cache.glob("e5-int8-*.onnx")
    graph = onnx.load(str(kept))
    (bias,) = [t for t in graph.graph.initializer if t.name == "l0.qkv.b"]
    values = onnx.numpy_helper.to_array(bias) + np.random.default_rng(3).standard_normal(1152).astype(np.float32)
    bias.CopyFrom(onnx.numpy_helper.from_array(values, bias.name))
    swapped = tmp_path / kept.name
    onnx.save(graph, str(swapped))
    own = _readings(swapped, reference, e5_int8.CALIBRATION)
    onnx.helper.set_model_props(graph, {"imagesvc.calibration": base64.b64encode(own.tobytes()).decode()})
    onnx.save(graph, str(swapped))
    planted = swapped.read_bytes()
    lion = reference.encode(["a lion", "leo rubeus"], True)
    assert _cosines(_readings(swapped, reference, (("a lion", True),)), lion[:1]).min() < 0.99  # really altered

    model = E5Int8(cache=tmp_path)
    assert model.agreement >= e5_int8.AGREEMENT
    assert swapped.read_bytes() != planted  # replaced by a new build
    assert _cosines(model.encode(["a lion", "leo rubeus"], True), lion).min() >= 0.999


def test_the_check_is_the_model_files_reading_at_load(int8: E5Int8, reference: E5) -> None:
    """What a graph is checked against is the numpy reading of the model file, computed when it is read: the check
    texts in both roles and four scripts, and one query drawn then."""
    texts = e5_int8.check_texts()
    assert texts[: len(e5_int8.CHECK_TEXTS)] == e5_int8.CHECK_TEXTS and len(texts) == len(e5_int8.CHECK_TEXTS) + 1
    assert {query for _, query in texts} == {True, False} and texts[-1] not in e5_int8.CALIBRATION
    want = e5_int8.reference(reference, e5._Layout.read(e5.model_file()), texts)
    for (text, query), row in zip(texts, want, strict=True):
        numpy = reference.encode([text], query)[0]
        assert float(row @ numpy / np.linalg.norm(row)) == pytest.approx(1.0, abs=1e-5)


def _foreign_graph(file: Path, output: str = "y") -> None:
    """A graph that passes its states through (``y = x``, or named otherwise)."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None, 384])
    y = helper.make_tensor_value_info(output, TensorProto.FLOAT, [None, None, 384])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], [output])], "foreign", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(file))


@pytest.mark.parametrize(
    "output",
    [
        "y",  # a graph that runs, and reads nothing as e5 does
        "out",  # a graph that cannot run as this one: onnxruntime's own error
    ],
    ids=["reads-otherwise", "cannot-run"],
)
def test_a_foreign_graph_under_the_right_name_is_built_again(tmp_path: Path, int8: E5Int8, output: str) -> None:
    planted = tmp_path / f"e5-int8-{e5_int8.cache_key()}.onnx"
    _foreign_graph(planted, output)
    model = E5Int8(cache=tmp_path)
    assert model.agreement >= e5_int8.AGREEMENT
    assert np.array_equal(model.encode(["a lion"], True), int8.encode(["a lion"], True))


def test_graphs_of_other_keys_and_files_left_aside_are_removed_by_a_build(tmp_path: Path, cache: Path) -> None:
    old = tmp_path / "e5-int8-0123456789abcdef.onnx"  # an earlier release's
    old.write_bytes(b"x" * 1000)
    aside = tmp_path / f".e5-int8-{e5_int8.cache_key()}.onnx.999.1"  # a worker killed while it built
    aside.write_bytes(b"x" * 1000)
    os.utime(aside, (1, 1))
    E5Int8(cache=tmp_path)
    assert _names(tmp_path) == [e5_int8.LOCK, f"e5-int8-{e5_int8.cache_key()}.onnx"]
    assert not old.exists() and not aside.exists()


def test_workers_starting_together_build_once(tmp_path: Path, cache: Path) -> None:
    """Three workers of a fresh node: one builds, the others wait for its file and read it."""
    script = (
        "import sys, pathlib\nfrom imagesvc.search import e5_int8\nprint(e5_int8.built(pathlib.Path(sys.argv[1]))[1])"
    )
    runs = [
        subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
        for _ in range(3)
    ]
    fresh = [run.communicate(timeout=300)[0].strip() for run in runs]
    assert sorted(fresh) == ["False", "False", "True"]
    assert len(list(tmp_path.glob("e5-int8-*.onnx"))) == 1


def test_a_relative_cache_home_is_ignored(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert e5_int8.default_cache() == tmp_path / ".cache" / "imagesvc"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "absolute"))
    assert e5_int8.default_cache() == tmp_path / "absolute" / "imagesvc"


def test_a_failed_build_says_why(tmp_path: Path, cache: Path) -> None:
    cut = tmp_path / "e5-small-q4.bin"
    cut.write_bytes(e5.model_file().read_bytes()[:200_000])
    with pytest.raises(RuntimeError, match="building e5's int8 graph failed") as failed:
        e5_int8.built(tmp_path / "cache", cut)
    assert "ValueError" in str(failed.value)
    assert _names(tmp_path / "cache") == [e5_int8.LOCK]


def test_without_a_cache_nothing_is_left_behind(cache: Path, reference: E5) -> None:
    before = set(Path(tempfile.gettempdir()).glob("imagesvc-e5-*"))
    model = E5Int8(cache=False)
    assert set(Path(tempfile.gettempdir()).glob("imagesvc-e5-*")) == before
    assert _cosines(model.encode(["a lion"], True), reference.encode(["a lion"], True))[0] >= 0.999


def test_a_serving_worker_reads_int8_and_an_index_job_numpy(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache.parent / "home-cache"))
    assert text_models.e5_reading() == "int8 on ONNX Runtime"
    assert text_models.e5_reading(bulk=True) == "float32 on numpy"
    serving, bulk = text_models.load("e5", 1), text_models.load("e5", 1, bulk=True)
    assert type(serving).__name__ == "_E5Int8" and type(bulk).__name__ == "_E5Numpy"
    texts = ["נחש הבולע את זנבו", "a serpent biting its tail"]
    assert _cosines(serving.queries(texts), bulk.queries(texts)).min() >= 0.999


def test_a_graph_that_fails_its_check_leaves_the_worker_another_reading(
    cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No graph can agree to a cosine over 1: it is refused, and the worker reads e5 another way, with a warning."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache.parent / "refused-cache"))
    monkeypatch.setattr(e5_int8, "AGREEMENT", 1.5)
    with caplog.at_level(logging.WARNING):
        model = text_models.load("e5", 1)
    assert type(model).__name__ in ("_E5", "_E5Numpy")
    assert "e5 cannot run on ONNX Runtime here" in caplog.text and "check texts" in caplog.text
    assert model.queries(["a lion"]).shape == (1, 384)
    assert not list((cache.parent / "refused-cache" / "imagesvc").glob("*.onnx"))


def test_doctor_says_e5_reads_in_int8_and_whether_its_graph_is_built(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from imagesvc.cli import main

    monkeypatch.setenv("IMAGESVC_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("IMAGESVC_SESSION_SECRET", "s")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "fresh"))
    main(["doctor", "--json"])
    found = {f["check"]: f for f in json.loads(capsys.readouterr().out)}["text model"]
    assert "e5 reads through int8 on ONNX Runtime" in found["message"]
    assert f"built by the first worker, ~1.3 s, into {tmp_path / 'fresh' / 'imagesvc'}" in found["message"]
    graph, _ = e5_int8.built(tmp_path / "fresh" / "imagesvc")
    main(["doctor", "--json"])
    found = {f["check"]: f for f in json.loads(capsys.readouterr().out)}["text model"]
    assert f"(its graph: {graph})" in found["message"]
