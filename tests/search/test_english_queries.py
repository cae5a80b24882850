"""English queries read by MiniLM, every other by e5 (``IMAGESVC_TEXT_MODEL=e5+minilm``, the default): which queries
read as English (``glosses.english``), and which model's columns each query's vector fills."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from imagesvc.search import text_models
from imagesvc.search.dense import Passages
from imagesvc.search.glosses import english
from imagesvc.search.text_models import TextModel
from imagesvc.search.vectors import VectorIndex
from tests.parts import missing_part

ROOT = Path(__file__).resolve().parents[2]

ENGLISH = [
    "a dragon devouring its own tail",
    "Madonna bloom, emblem of chastity",
    "digging for ore",  # "ore" is an Italian word too ("hours")
    "mine shaft with ladders",  # "mine" a French one
    "chart of ore lodes in highland country",
    "scrolling tendrils as a chapter's final flourish",  # no "s" read as French
    "how the moon waxes and wanes",
    "SERPENT BITING ITS TAIL",
    "snake",
    "a naïve café drawing",  # letters English borrows, in words its list has
]
NOT_ENGLISH = [
    "Drache, der seinen eigenen Schwanz frisst",
    "Himmelssphären um die Erde mit dem Tierkreis",
    "la sauge, de la racine à la fleur",
    "rosier en fleurs",
    "serpente che si morde la coda",
    "dragón que se muerde la cola",
    "slang om een boom",  # Dutch
    "vrouw met kind",
    "Frau hält Kind",  # a German letter English does not write
    "a mão de Deus",  # Portuguese
    "do mar",
    "sol et luna",
    "the drago and the serpente",  # English glue, Italian words: under two thirds of the words are English
    "a Schlange with the Drache",
    "fornax",  # Latin words that the English list also has, and nothing more English
    "serpens",
    "נחש הבולע את זנבו",
    "أفعى تبتلع ذيلها",
    "衔尾蛇",
    "",
    "   ",
    "12345",
    "🐉🔥",
    "!!!",
]


@pytest.mark.parametrize("query", ENGLISH)
def test_english_queries_read_as_english(query: str) -> None:
    assert english(query)


@pytest.mark.parametrize("query", NOT_ENGLISH)
def test_other_languages_do_not(query: str) -> None:
    assert not english(query)


def test_no_query_of_another_language_in_either_evaluation_set_reads_as_english() -> None:
    for name in ("search_eval_languages.json", "search_eval_languages_heldout.json"):
        for concept in json.loads((ROOT / "benchmarks" / name).read_text(encoding="utf-8"))["concepts"]:
            for lang, query in concept["queries"].items():
                if lang not in ("en", "la"):  # Latin ones may: a dictionary glosses them first (the model's order)
                    assert not english(query), (name, lang, query)


@pytest.mark.parametrize(
    "query",
    [
        "dragon " * 10_000,
        "\x00dragon\x00",
        "\u202edragon\u202c tail",
        "dragon\ud800tail",
        "\ufdd0\uffff",
        "d\u0301ragon",
        "ﬁre and ﬂame",  # ligatures, read as letters after NFKC
        "a" * 100_000,
    ],
)
def test_hostile_queries_are_answered_never_raised(query: str) -> None:
    assert english(query) in (True, False)


@pytest.fixture(scope="module")
def pair() -> TextModel:
    model = TextModel("e5+minilm")
    if model.info is None or model.info.name != "e5+minilm":
        missing_part(f"e5+minilm cannot run here: {model.note}")
    model.load()
    return model


def test_an_english_query_fills_minilms_columns_only(pair: TextModel) -> None:
    from imagesvc.search.minilm import MiniLM

    vector = pair.query("a dragon devouring its own tail")
    assert vector.shape == (768,) and not vector[:384].any()
    assert np.allclose(vector[384:], MiniLM().encode(["a dragon devouring its own tail"])[0], atol=1e-6)


@pytest.mark.parametrize(
    "query",
    [
        "Drache, der seinen eigenen Schwanz frisst",  # German: e5 alone, no gloss
        "衔尾蛇",
        "draco caudam suam devorans",  # Latin, glossed: e5 with its gloss
        "serpente che si morde la coda",  # Italian, glossed
        "أفعى تبتلع ذيلها",  # Arabic, glossed
    ],
)
def test_any_other_query_fills_e5s_columns_only(pair: TextModel, query: str) -> None:
    vector = pair.query(query)
    assert vector.shape == (768,) and not vector[384:].any() and np.isclose(np.linalg.norm(vector[:384]), 1.0)


def test_arabic_is_glossed_beside_minilm_as_beside_e5_alone(pair: TextModel) -> None:
    assert "ar" in pair.glossed and pair.glossed == TextModel("e5").glossed


def test_a_query_only_minilm_read_is_scored_on_minilms_cosines() -> None:
    info = text_models.model_info("e5+minilm")
    rng = np.random.default_rng(3)
    rows = rng.standard_normal((6, 768)).astype(np.float32)
    rows[:, :384] /= np.linalg.norm(rows[:, :384], axis=1, keepdims=True)
    rows[:, 384:] /= np.linalg.norm(rows[:, 384:], axis=1, keepdims=True)
    index = VectorIndex(["a", "a", "b", "b", "c", "c"], [""] * 6, rows, info.key)
    query = np.zeros(768, np.float32)
    query[384:] = rows[3, 384:]  # b's second passage, in MiniLM's columns
    for prefilter in (None, 1):  # every passage scored, and the two steps of a large index
        passages = Passages.of(index, prefilter_from=prefilter, split=info.split)
        scores = passages.dense(rows, query, info)
        want = [max(rows[n, 384:] @ query[384:] for n in (2 * k, 2 * k + 1)) for k in range(3)]
        assert np.allclose(scores, want, atol=1e-6), (scores, want)  # MiniLM's cosines are the common scale
        assert passages.ids[int(np.argmax(scores))] == "b"


def test_a_large_pair_index_scores_each_models_part_from_its_own_columns() -> None:
    """On a large index the candidates' passages of a query read by one model are read as half-width rows (its own
    columns only): the scores are those of the whole rows, for either model and for both at once."""
    info = text_models.model_info("e5+minilm")
    rng = np.random.default_rng(11)
    ids = [f"i{k}" for k in range(300) for _ in range(3)]
    rows = rng.standard_normal((len(ids), 768)).astype(np.float32)
    rows[:, :384] /= np.linalg.norm(rows[:, :384], axis=1, keepdims=True)
    rows[:, 384:] /= np.linalg.norm(rows[:, 384:], axis=1, keepdims=True)
    index = VectorIndex(ids, [""] * len(ids), rows, info.key)
    large = Passages.of(index, prefilter_from=1, split=info.split)
    exact = Passages.of(index, prefilter_from=10**9, split=info.split)
    for part in (slice(0, 384), slice(384, 768)):
        vector = np.zeros(768, np.float32)
        vector[part] = rows[400, part]
        got, want = large.score(rows, vector), exact.score(rows, vector)
        assert np.allclose(got, want, atol=1e-6)  # 300 illustrations: every one is a candidate, scored exactly
        assert large.ids[int(np.argmax(got))] == ids[400]
    both = rows[400] / np.sqrt(2)
    assert np.allclose(large.score(rows, both), exact.score(rows, both), atol=1e-6)


@pytest.mark.parametrize("query", ["in a garden", "a cross", "flowers in a vase", "plant in pot"])
def test_english_words_a_latin_or_italian_dictionary_also_has_are_read_as_english(pair: TextModel, query: str) -> None:
    """Each word here is a Latin or Italian form too ("vase", "cross", "pot"): the dictionaries read them as
    "vessel", "motocross", "multiply by X obtain". An English query whose every such word is English is not glossed,
    on the vector's side and on what the response says alike (``TextModel.gloss``), and MiniLM reads it."""
    assert pair.gloss(query) is None
    vector = pair.query(query)
    assert not vector[:384].any() and vector[384:].any()


@pytest.mark.parametrize(
    "query", ["draco caudam suam devorans", "caelum supra, tellus infra, in orbe", "serpente che si morde la coda"]
)
def test_latin_and_italian_keep_their_gloss(pair: TextModel, query: str) -> None:
    found = pair.gloss(query)
    assert found is not None and found.language in ("la", "it")
