"""What a search inside a book costs, on both backends: linear in the query's distinct words, bounded per search.

The attack: 32 repeats of a phrase of common words, or 32 hyphenated pairs (each a phrase), in a long book. Each
phrase was checked by reading and folding every text holding its words again, once per phrase: ~200 times the work
of one word. Work is asserted by counting (``SearchWork``, and the texts a ranking asks to read), never by the clock.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imagesvc.catalog import Catalog, page_text
from imagesvc.catalog.text_fold import fold, query_words
from tests.catalog.conftest import Backend
from tests.catalog.test_page_search import ALL, write_book

PAGES = 120
SENTENCE = "Der König sprach zu seinem Volke über das Gold und die Öfen der Alchemisten."


@pytest.fixture
def long_book(backend: Backend) -> Catalog:
    """A book whose every page holds the same common words in two texts (every phrase below in each)."""
    catalog = backend.open()
    write_book(catalog, "long", {n: (SENTENCE * 3, f"Page {n}. " + SENTENCE, None) for n in range(1, PAGES + 1)})
    return catalog


def _search(catalog: Catalog, query: str, **work: Any) -> tuple[Any, Any, Any]:
    from imagesvc.catalog.page_rank import SearchWork

    spent = SearchWork(**work)
    found, total = catalog.search_pages("long", query_words(query), ALL, limit=20, offset=0, work=spent)
    return found, total, spent


@pytest.mark.parametrize(
    "query",
    [
        " ".join(['"der konig"'] * 32),  # one phrase 32 times
        " ".join(["der-konig"] * 32),  # a hyphenated pair 32 times: the same phrase
        " ".join(['"der konig"', "der-konig", '"DER KÖNIG"', '"der, konig"'] * 8),  # spelt four ways, one phrase
    ],
)
def test_a_repeated_phrase_costs_what_it_costs_once(long_book: Catalog, query: str) -> None:
    once_found, once_total, once = _search(long_book, '"der konig"')
    found, total, repeated = _search(long_book, query)
    assert (found, total) == (once_found, once_total) and total == PAGES
    assert once.texts_read == 2 * PAGES  # each text holding both words, read once
    assert (repeated.lookups, repeated.texts_read, repeated.checks) == (once.lookups, once.texts_read, once.checks)


def test_distinct_phrases_read_each_text_once(long_book: Catalog) -> None:
    words = SENTENCE.lower().replace("ö", "o").replace("ü", "u").rstrip(".").split()
    pairs = [f"{a}-{b}" for a, b in itertools.pairwise(words)]  # 13 distinct phrases, all on every page
    _, total, work = _search(long_book, " ".join(pairs))
    assert total == PAGES
    assert work.texts_read == 2 * PAGES  # not 12 times: read and folded once for every phrase
    assert work.checks == len(pairs) * 2 * PAGES
    assert work.lookups == len(set(words))  # each distinct term looked up once


def test_a_page_without_the_first_phrase_is_checked_no_further(backend: Backend) -> None:
    catalog = backend.open()
    # every page holds the words; only page 1 holds them in the order asked
    write_book(
        catalog, "long", {1: ("gold und salz", None, None), **{n: ("salz und gold", None, None) for n in range(2, 41)}}
    )
    found, total, work = _search(catalog, "gold-und und-salz gold-und-salz")
    assert ([n for n, _, _ in found], total) == ([1], 1)
    assert work.texts_read == 40
    assert work.checks == 3 + 39  # page 1 checked for all three; the others fail the first and are dropped


def test_a_search_past_its_work_budget_is_refused_before_reading_a_text(long_book: Catalog) -> None:
    from imagesvc.catalog.page_rank import SearchTooCostly, SearchWork

    assert _search(long_book, "der-konig konig-sprach")[2].spent < SearchWork().limit  # type: ignore[operator]
    with pytest.raises(SearchTooCostly) as refused:
        _search(long_book, "der-konig konig-sprach", limit=2_000)
    error = refused.value
    assert (error.code, error.status, error.details["argument"]) == ("invalid_request", 400, "q")
    assert error.details["work"] > error.details["work_limit"] == 2_000


def test_the_default_budget_admits_a_common_phrase_in_a_1500_page_book() -> None:
    """The longest books hold ~1,500 pages: a quoted phrase of common words, read in every text, must fit."""
    from imagesvc.catalog.page_rank import SearchWork, rank

    texts = {page << 2 | field for page in range(1, 1501) for field in range(3)}
    work = SearchWork()
    _, total = rank(query_words('"der konig"'), lambda term: set(texts), lambda keys: dict.fromkeys(keys,
                        "der konig"), limit=20, offset=0, work=work)  # fmt: skip
    assert total == 1500 and work.texts_read == 4500


def test_the_ranking_reads_each_text_once_however_many_phrases() -> None:
    """The shared ranking, fed by look-ups in memory: 32 repeated or hyphenated phrases ask to read each text once
    (the texts it was handed, counted), as one phrase does."""
    rng = random.Random(7)
    vocabulary = ["der", "die", "und", "das", "zu", "von", "gold", "salz", "ofen", "wasser"]
    stored = {page << 2 | field: " ".join(rng.choices(vocabulary, k=200)) for page in range(300) for field in (0, 1)}
    reads: list[int] = []

    def texts(term: str) -> set[int]:
        return {key for key, text in stored.items() if term in text.split()}

    def read(keys: set[int]) -> dict[int, str]:
        reads.append(len(keys))
        return {key: stored[key] for key in keys}

    def cost(query: str) -> tuple[int, int]:
        reads.clear()
        _, total = page_text.rank(query_words(query), texts, read, limit=20, offset=0)
        return sum(reads), total

    one, total = cost('"und der"')
    assert total > 0 and one <= len(stored)
    assert cost(" ".join(['"und der"'] * 32)) == (one, total)
    assert cost(" ".join(["und-der"] * 32)) == (one, total)
    pairs = " ".join(f"{a}-{b}" for a, b in zip(vocabulary, vocabulary[1:] + vocabulary[:1], strict=True))
    assert cost(pairs)[0] <= len(stored)  # ten distinct phrases: still each text at most once


_ALPHABET = "ab ab-,.;_'\u00e9\u017f\u00c6\u05d0\u05b0\u0627\u064e\u0640\u4e00\u4e8c\u4e09\uac00\u2019 1"


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.text(_ALPHABET, max_size=40), st.text(_ALPHABET, min_size=1, max_size=12))
def test_the_phrase_check_agrees_with_the_word_s_own(text: str, query: str) -> None:
    """The search's phrase check (a literal scan, the boundary checked after) finds a phrase exactly where
    ``Word.in_folded`` does, in any script, overlapping matches included."""
    from imagesvc.catalog.page_rank import Phrase

    folded = fold(text)
    for word in query_words(f'"{query}"') + query_words(query):
        assert Phrase(word).found_in(folded) == word.in_folded(folded), (text, query, word)
