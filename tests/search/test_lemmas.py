"""Lemmas of words (imagesvc/search/lemmas.py): simplemma's lists read through a compact index, for the query glosses
and for anything else that matches words across inflection (a search inside a book's text)."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("simplemma", reason="the text extra is not installed (pip install .[text])")

from imagesvc.search.lemmas import LONGEST_WORD, Lemmas, _Forms, lemma, lemmas, plain


@pytest.mark.parametrize(
    ("word", "language", "expected"),
    [
        ("caudam", "la", "cauda"),  # Latin inflection
        ("spinis", "la", "spina"),
        ("cunicoli", "it", "cunicolo"),  # an Italian plural
        ("dell'anno", "it", "anno"),  # an elided article
        ("Häusern", "de", "Haus"),  # German inflection (a book's text in German)
        ("הבולע", "he", "בלע"),  # the Hebrew article and a vowel letter
        ("בבית", "he", "בית"),  # a Hebrew preposition
        ("والقمر", "ar", "قمر"),  # the Arabic conjunction and article
        ("ببوصلة", "ar", "بوصلة"),  # an Arabic preposition
    ],
)
def test_a_word_reads_as_its_lemma(word: str, language: str, expected: str) -> None:
    assert lemma(word, language) == expected


def test_a_word_no_list_has_is_none_and_so_is_a_word_longer_than_any() -> None:
    assert lemma("zzqxv", "la") is None and lemma("", "la") is None
    assert "caudam" in lemmas("la") and "zzqxv" not in lemmas("la") and 3 not in lemmas("la")
    assert lemma("a" * (LONGEST_WORD + 1), "la") is None


def test_long_real_words_are_read() -> None:
    """The bound on a word's length is above the lists' long words: a 27-letter Latin and a 34-letter German one."""
    assert lemma("honorificabilitudinitatibus", "la") == "honorificabilitudinitas"
    assert lemma("Donaudampfschifffahrtsgesellschaft", "de") == "Donaudampfschifffahrtsgesellschaft"


def test_pointed_hebrew_and_vowelled_arabic_read_as_plain_letters() -> None:
    assert plain("שׁוֹשַׁן") == "שושן" and lemma("הַבּוֹלֵעַ", "he") == lemma("הבולע", "he")
    assert plain("زَنْبَقَة") == "زنبقة" and plain("زنـــبقة") == "زنبقة"
    assert plain("أفعى") == "أفعى"  # the hamza stays on its letter: simplemma's lists write it
    assert plain("città") == "città" and plain("citta\u0300") == "città"  # a Latin accent stays


def test_an_unknown_language_is_an_error_when_read() -> None:
    with pytest.raises(ValueError):
        Lemmas("xx")


@pytest.mark.parametrize("language", ["la", "it", "he", "ar"])
def test_the_compact_index_answers_as_simplemmas_own_dictionary(language: str) -> None:
    """Every sampled form (and forms just before and after it in sort order) reads the same through ``_Forms`` as
    through simplemma's decoded dict: the index never skips a block or stops early."""
    from simplemma.strategies.dictionaries import DefaultDictionaryFactory

    whole = DefaultDictionaryFactory(cache_max_size=1).get_dictionary(language)
    forms = _Forms(language)
    assert len(forms) == len(whole)
    sample = random.Random(20261207).sample(list(whole), 2000)
    probes = sample + [w[:-1] for w in sample] + [w + "q" for w in sample] + ["", "\x00", "\U0010ffff"]
    assert [forms.get(w) for w in probes] == [whole.get(w) for w in probes]
    assert next(iter(forms)) == next(iter(whole))
    with pytest.raises(KeyError):
        forms["zzqxv-not-a-form"]


def test_simplemma_is_the_release_whose_private_format_lemmas_reads() -> None:
    """lemmas._Forms reads simplemma's private stream format: another release fails here, loudly, not in a worker."""
    from importlib.metadata import version

    from imagesvc.search.lemmas import SIMPLEMMA_SERIES, check_simplemma

    assert version("simplemma").startswith(SIMPLEMMA_SERIES), "check lemmas._Forms against this simplemma"
    check_simplemma()
