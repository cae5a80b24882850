"""Spelling correction against the words of the library: a query word that no illustration uses is replaced by the
closest word that one does ("alembik" -> "alembic"), so keyword and dense search see what the searcher meant.

Candidates share the first letter and differ in length by at most two; closeness is difflib's ratio (at least
``CUTOFF``). Words the library uses are never changed, nor words under four letters, nor words a dictionary knows
(``english_word``: "ovens" is a word, even if no description uses it, and must not become "opens").
"""

from __future__ import annotations

import difflib
import re
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable

from imagesvc.search.packed import Table, int_table, release_freed_memory

__all__ = ["CUTOFF", "Vocabulary", "english_frequency", "english_word"]

CUTOFF = 0.8
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
_lock = threading.Lock()
_english: Table[int] | None = None


def _frequencies() -> Table[int] | None:
    """pyspellchecker's English words and how often each occurs in its corpus, packed (~3 MB for 160,000 words, not
    the ~14 MB of a dict); ``None`` without pyspellchecker."""
    global _english
    if _english is not None:  # once read, never replaced: no lock needed
        return _english
    with _lock:
        if _english is None:
            try:
                from spellchecker import SpellChecker
            except ImportError:
                return None
            _english = int_table(dict(SpellChecker(language="en", distance=1).word_frequency.items()))
            release_freed_memory()
    return _english


def english_word(word: str) -> bool:
    """Whether ``word`` is in pyspellchecker's English word list (its only use here: the descriptions, and so the
    library words a misspelling is corrected to, are English). A word of another language is never corrected to a
    library word unless it is as close to one as a misspelling. Loaded on first use (~0.3 s); without pyspellchecker
    every word counts as known, so nothing is corrected."""
    words = _frequencies()
    return words is None or word.casefold() in words


def english_frequency(word: str) -> int:
    """How often ``word`` occurs in pyspellchecker's English corpus (0: not a word it has, or no pyspellchecker)."""
    words = _frequencies()
    return 0 if words is None else words.get(word.casefold(), 0)


class Vocabulary:
    """The words of a set of texts, bucketed by first letter for quick look-ups."""

    def __init__(self, texts: Iterable[str]) -> None:
        self.words: set[str] = set()
        for text in texts:
            self.words.update(w for w in _WORD.findall(text.casefold()) if len(w) >= 3)
        self._buckets: dict[str, list[str]] = defaultdict(list)
        for word in sorted(self.words):
            self._buckets[word[0]].append(word)

    def closest(self, word: str) -> str | None:
        """The library word closest to ``word``, or ``None`` when ``word`` is known, short, or nothing is close."""
        w = word.casefold()
        if len(w) < 4 or w in self.words:
            return None
        pool = [c for c in self._buckets.get(w[0], ()) if abs(len(c) - len(w)) <= 2]
        found = difflib.get_close_matches(w, pool, n=1, cutoff=CUTOFF)
        return found[0] if found else None

    def correct(self, text: str, is_word: Callable[[str], bool]) -> tuple[str, dict[str, str]]:
        """``text`` with misspelt words replaced by their closest library word, and the replacements made. A word
        is misspelt when the library does not use it and ``is_word`` (a dictionary) does not know it either."""
        fixes: dict[str, str] = {}

        def swap(match: re.Match[str]) -> str:
            better = self.closest(match.group(0))
            if better is not None and is_word(match.group(0)):
                better = None
            if better is None:
                return match.group(0)
            fixes[match.group(0)] = better
            return better

        return _WORD.sub(swap, text), fixes
