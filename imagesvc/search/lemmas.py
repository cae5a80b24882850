"""The lemma of a word in a given language, from ``simplemma``'s dictionaries (MIT; its lemma data is in the wheel).

``lemma("caudam", "la")`` is ``"cauda"``, ``lemma("הבולע", "he")`` is ``"בלע"`` (the article off), ``lemma("والقمر",
"ar")`` is ``"قمر"`` (the conjunction and the article off), ``lemma("cunicoli", "it")`` is ``"cunicolo"``; a word the
dictionary of its language does not know is ``None``. simplemma's whole chain reads the word: its form lists first,
then clitics (``-que``, ``dell'``), hyphens and, for the languages it has them for, rules and affixes.

Anything that matches words across inflection may use it, in any language simplemma has data for (German, French,
...): the query glosses (``glosses``) look a query word's lemma up in a bilingual dictionary, and a search inside a
book can lemmatise the page's words and the query's alike (``lemma(word, language)``, or ``lemmas(language)`` for one
language's reader). A language's list is read on its first word and kept for the process as simplemma ships it, its
sorted front-coded bytes, with a small index of where every 32nd form starts (``_Forms``): Latin ~8 MB, Italian ~2,
Hebrew ~1, Arabic ~2.5, where a dict of every form would hold ~200 MB for the four and simplemma's own stream reader
~26 MB. A word costs ~5 to 15 µs. Lookups are thread-safe; reading a language is serialised.
"""

from __future__ import annotations

import threading
import unicodedata
from array import array
from bisect import bisect_right
from collections.abc import Iterator, Mapping, Sequence
from functools import cache
from typing import Any

__all__ = ["LONGEST_WORD", "SIMPLEMMA_SERIES", "Lemmas", "check_simplemma", "lemma", "lemmas", "plain"]

LONGEST_WORD = 40  # letters: longer is no word of any dictionary here, and is never looked up (bounded work)
_TATWEEL = "\u0640"  # a letter's stretch, no letter


def plain(word: str) -> str:
    """``word`` as the dictionaries spell their keys: NFC, without the marks of Hebrew and Arabic (points,
    cantillation, tashkeel, Quranic marks) or tatweel; case kept (German nouns are capitalised), and a Latin or
    Italian accent, one letter with its own in NFC, too ("città"). NFC keeps an Arabic hamza on its letter ("أ")."""
    return "".join(
        c
        for c in unicodedata.normalize("NFC", word)
        if c != _TATWEEL and not ("\u0590" <= c <= "\u08ff" and unicodedata.category(c) == "Mn")
    )


class Lemmas:
    """simplemma's reading of one language's words."""

    def __init__(self, language: str) -> None:
        from simplemma.strategies import DefaultStrategy

        self.language = language
        self._strategy = DefaultStrategy(dictionary_factory=_FACTORY)  # type: ignore[arg-type]
        self._strategy.get_lemma("", language)  # read the dictionary now (an unknown language raises ValueError)

    def lemma(self, word: str) -> str | None:
        """The lemma of ``word``, or ``None`` where the dictionary knows no form of it (or it is longer than any)."""
        word = plain(word)
        if not word or len(word) > LONGEST_WORD:
            return None
        return self._strategy.get_lemma(word, self.language)

    def __contains__(self, word: object) -> bool:
        return isinstance(word, str) and self.lemma(word) is not None


class _Blob(Sequence[bytes]):
    """Byte strings kept as one ``bytes`` and where each starts in it (4 bytes each beside their bytes)."""

    def __init__(self, items: list[bytes]) -> None:
        self._data = b"".join(items)
        self._starts = array("I", [0])
        for item in items:
            self._starts.append(self._starts[-1] + len(item))

    def __len__(self) -> int:
        return len(self._starts) - 1

    def __getitem__(self, index: int) -> bytes:  # type: ignore[override]
        return self._data[self._starts[index] : self._starts[index + 1]]


SIMPLEMMA_SERIES = "2.0."  # the release whose private stream reader ``_Forms`` uses (pyproject pins it)


def check_simplemma() -> None:
    """Refuse, naming the fix, a simplemma whose private data format ``_Forms`` was not written for."""
    from importlib.metadata import version

    found = version("simplemma")
    if not found.startswith(SIMPLEMMA_SERIES):
        raise RuntimeError(
            f"simplemma {found} is installed; imagesvc/search/lemmas.py reads the private data format of simplemma "
            f"{SIMPLEMMA_SERIES}x: install that (pyproject pins it) or update _Forms"
        )


class _Forms(Mapping[str, str]):
    """One language's forms -> lemmas as simplemma ships them: its sorted, front-coded stream, kept as it is, and
    where every ``_BLOCK``-th record starts with what decoding it needs (the record before it), in flat arrays. A
    lookup bisects the blocks' first keys and decodes one block. simplemma's own reader of the stream keeps the same
    index as ~40,000 Python tuples for Latin (~10 MB); here it is ~2 MB."""

    def __init__(self, language: str) -> None:
        check_simplemma()
        from simplemma.strategies.dictionaries import frontcode  # the format's reader (simplemma 2.0)
        from simplemma.strategies.dictionaries.dictionary_factory import _read_decompressed

        self._frontcode = frontcode
        data = _read_decompressed(language)
        self._reversed, count, first = frontcode._read_header(data)
        starts, firsts, keys, values = array("I"), [], [], []
        key = value = b""
        number = -1
        for number, (start, stored_key, stored_value) in enumerate(frontcode._iter_records(data, first)):
            if number % _BLOCK == 0:
                starts.append(start)
                firsts.append(stored_key)
                keys.append(key)
                values.append(value)
            key, value = stored_key, stored_value
        if number + 1 != count:
            raise ValueError(f"simplemma's {language} data holds {number + 1} forms of {count}")
        self._data, self._count, self._first, self._starts = data, count, first, starts
        self._firsts, self._keys, self._values = _Blob(firsts), _Blob(keys), _Blob(values)

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        """The lemma of the form ``key`` (as simplemma spells it), or ``default``."""
        target = key.encode("utf-8", "surrogatepass")
        if self._reversed:
            target = target[::-1]
        block = bisect_right(self._firsts, target) - 1
        if block < 0:
            return default
        seed = (self._starts[block], self._keys[block], self._values[block])
        for _start, stored_key, stored_value in self._frontcode._iter_records(self._data, *seed):
            if stored_key == target:  # the next block's first key is past the target
                return (stored_value[::-1] if self._reversed else stored_value).decode()
            if stored_key > target:
                return default
        return default

    def __getitem__(self, key: str) -> str:
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return found  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[str]:
        for _start, stored_key, _value in self._frontcode._iter_records(self._data, self._first):
            yield (stored_key[::-1] if self._reversed else stored_key).decode()

    def __len__(self) -> int:
        return self._count


class _Factory:
    """A simplemma ``DictionaryFactory``: each language's ``_Forms``, read once (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read: dict[str, _Forms] = {}

    def get_dictionary(self, lang: str) -> Mapping[str, str]:
        with self._lock:
            if lang not in self._read:
                self._read[lang] = _Forms(lang)
            return self._read[lang]


_BLOCK = 32  # records a lookup decodes at most: ~5 µs; the index costs ~16 bytes a block beside the keys
_FACTORY = _Factory()
_LOCK = threading.Lock()


@cache
def _cached(language: str) -> Lemmas:
    return Lemmas(language)


def lemmas(language: str) -> Lemmas:
    """The process's reading of ``language`` (an ISO 639-1 code simplemma has data for), read on first use."""
    with _LOCK:
        return _cached(language)


def lemma(word: str, language: str) -> str | None:
    """The lemma of ``word`` in ``language``, or ``None`` (see ``Lemmas.lemma``)."""
    return lemmas(language).lemma(word)
