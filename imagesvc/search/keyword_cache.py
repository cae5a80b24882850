"""A node's keyword matches of recent queries, kept for the catalog generation they were read at.

A keyword query's matches (every illustration a common word names: 11,000-21,000 of 200,000) are what its next
pages, its filtered variants (a type, a year range, ``maxPerBook``) and other searchers of the same words read
again: on PostgreSQL that read is the largest part of a query (``ts_rank`` of every match, 25-45 ms). The matches
depend only on the words and the catalog, so they are kept per search snapshot generation: a catalog write makes a
new generation (``SearchEngine.snapshot``), and entries of any other generation are dropped when it is first used.
The arrays are read-only; the cache holds at most ``size`` queries (~16 bytes a match).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

__all__ = ["KeywordCache"]

Matches = tuple[np.ndarray, np.ndarray]  # table rows (int64), scores (float64)


class KeywordCache:
    """``cache.get(generation, text, read)``: ``read()``'s (rows, scores) for ``text``, read once per generation."""

    def __init__(self, size: int = 32) -> None:
        self.size = size
        self.hits = 0
        self.misses = 0
        self._generation: int | None = None
        self._entries: OrderedDict[str, Matches] = OrderedDict()
        self._lock = threading.Lock()

    def peek(self, generation: int, text: str) -> Matches | None:
        """The kept matches of ``text`` at ``generation`` (a hit), or None."""
        with self._lock:
            found = self._entries.get(text) if generation == self._generation else None
            if found is not None:
                self._entries.move_to_end(text)
                self.hits += 1
            return found

    def get(self, generation: int, text: str, read: Callable[[], Matches]) -> Matches:
        if (found := self.peek(generation, text)) is not None:
            return found
        rows, scores = read()  # outside the lock: two threads may read one text at once, both get the same
        rows.flags.writeable = False
        scores.flags.writeable = False
        with self._lock:
            self.misses += 1
            if generation != self._generation:
                if self._generation is not None and generation < self._generation:
                    return rows, scores  # an older snapshot's query finishing late: not kept
                self._generation, self._entries = generation, OrderedDict()
            if self.size > 0:
                self._entries[text] = (rows, scores)
                while len(self._entries) > self.size:
                    self._entries.popitem(last=False)
        return rows, scores
