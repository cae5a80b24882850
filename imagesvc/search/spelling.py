"""Spelling correction against the words of the library: a query word that no illustration uses is replaced by the
closest word that one does ("alembik" -> "alembic"), so keyword and dense search see what the searcher meant.

Candidates share the first letter and differ in length by at most two; closeness is difflib's ratio (at least
``CUTOFF``). Words the library uses are never changed, nor words under four letters, nor words a dictionary knows
(``english_word``: "ovens" is a word, even if no description uses it, and must not become "opens").

The vocabulary is kept book by book: a catalog change replaces the words of the books it touched
(``Vocabulary.replace``), at a cost in proportion to those books, and a word leaves when no book uses it any more.
"""

from __future__ import annotations

import difflib
import re
import sys
import threading
from bisect import bisect_left, insort
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
    """The words of the library's illustration texts, kept book by book so that a catalog change is applied to the
    books it touched (``replace``), not read again whole; bucketed by first letter for quick look-ups. Thread-safe:
    look-ups and changes take one lock."""

    def __init__(self, rows: Iterable[tuple[str, str]] = ()) -> None:
        """``rows``: (book id, text) of every live illustration."""
        self.words: dict[str, int] = {}  # word -> how many books use it
        self.read = 0  # texts read so far (a whole read, then only the changed books' texts)
        self.seq = 0  # the catalog's change number its texts were read at (``changes.changed_books`` follows it)
        self._books: dict[str, tuple[str, ...]] = {}  # book -> the words its texts use
        self._buckets: dict[str, list[str]] = defaultdict(list)
        self._lock = threading.Lock()
        for book, found in self._words_by_book(rows).items():
            self._books[book] = found
            for word in found:
                self.words[word] = self.words.get(word, 0) + 1
        for word in sorted(self.words):
            self._buckets[word[0]].append(word)

    def _words_by_book(self, rows: Iterable[tuple[str, str]]) -> dict[str, tuple[str, ...]]:
        """Each book's words, each word one string shared by every book that uses it (interned: ~4.7 million
        book-word pairs at 200,000 illustrations would otherwise each hold a string of its own, ~250 MB)."""
        out: dict[str, tuple[str, ...]] = {}
        book: str | None = None
        words: set[str] = set()
        for book_id, text in rows:  # in catalog order: a book's texts come together, so it is finished when it ends
            self.read += 1
            if book_id != book:
                if book is not None:
                    out[book] = tuple(map(sys.intern, words.union(out.get(book, ()))))
                book, words = book_id, set()
            words.update(w for w in _WORD.findall(text.casefold()) if len(w) >= 3)
        if book is not None:
            out[book] = tuple(map(sys.intern, words.union(out.get(book, ()))))
        return out

    def replace(self, books: Iterable[str], rows: Iterable[tuple[str, str]]) -> None:
        """Make the words of ``books`` those of ``rows`` ((book id, text) of their live illustrations now; a book
        with none has no words any more). A word no other book uses leaves the vocabulary."""
        found = self._words_by_book(rows)
        with self._lock:
            for book in books:
                old, new = self._books.pop(book, ()), found.get(book, ())
                if new:
                    self._books[book] = new
                for word in set(new) - set(old):
                    count = self.words.get(word, 0)
                    self.words[word] = count + 1
                    if not count:
                        insort(self._buckets[word[0]], word)
                for word in set(old) - set(new):
                    count = self.words[word] - 1
                    if count:
                        self.words[word] = count
                        continue
                    del self.words[word]
                    bucket = self._buckets[word[0]]
                    del bucket[bisect_left(bucket, word)]

    def closest(self, word: str) -> str | None:
        """The library word closest to ``word``, or ``None`` when ``word`` is known, short, or nothing is close."""
        w = word.casefold()
        if len(w) < 4:
            return None
        with self._lock:
            if w in self.words:
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
