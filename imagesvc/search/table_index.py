"""The gallery table's two look-ups, kept so that a catalog change costs vector passes, never a rebuild in Python.

``Postings``: the rows holding each facet term (subject, figure, symbol), every term's rows packed into one array.
``RowIndex``: the row of each illustration id. Ids are numbered once, in the order they are first seen, in a dict
that every generation of one table shares and only ever grows; each table maps those numbers to its own rows.

When books change, the table's rows move (``old_at``: each old row's new row, -1 for a row that is gone) and the
changed books' rows arrive (``fresh_at``: their new rows). Both look-ups follow with a gather over their arrays and
Python work in proportion to the changed books, instead of 62,850 term arrays or 200,000 dict entries made again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from itertools import repeat

import numpy as np

__all__ = ["Postings", "RowIndex"]

Key = tuple[str, str]
_EMPTY = np.zeros(0, np.int64)


class Postings:
    """Each term's table rows (int64, in no particular order); read-only once built."""

    __slots__ = ("_rows", "_slot", "_start")

    def __init__(self, slot: dict[Key, int], start: np.ndarray, rows: np.ndarray) -> None:
        self._slot = slot  # term -> its slot; shared by the Postings derived from this one, never changed
        self._start = start  # slot k's rows are rows[start[k]:start[k + 1]]
        self._rows = rows

    @classmethod
    def of(cls, postings: Mapping[Key, Iterable[int]]) -> Postings:
        slot = {key: k for k, key in enumerate(postings)}
        parts = [np.asarray(list(rows), np.int64) for rows in postings.values()]
        start = np.r_[0, np.cumsum([len(p) for p in parts], dtype=np.int64)].astype(np.int64)
        return cls(slot, start, np.concatenate(parts) if parts else _EMPTY)

    def get(self, key: Key, default: np.ndarray | None = None) -> np.ndarray | None:
        k = self._slot.get(key)
        if k is None or k >= len(self._start) - 1 or self._start[k] == self._start[k + 1]:
            return default
        return self._rows[self._start[k] : self._start[k + 1]]

    def items(self) -> Iterator[tuple[Key, np.ndarray]]:
        """Every term that has rows, with them."""
        for key in self._slot:
            rows = self.get(key)
            if rows is not None:
                yield key, rows

    def __len__(self) -> int:
        return int(np.count_nonzero(np.diff(self._start)))

    def moved(self, old_at: np.ndarray, fresh: Postings, fresh_at: np.ndarray) -> Postings:
        """These postings after the rows moved (``old_at``) and ``fresh``'s rows arrived at ``fresh_at``."""
        slots = len(self._start) - 1
        term_of = np.repeat(np.arange(slots, dtype=np.int64), np.diff(self._start))
        rows = old_at[self._rows]
        kept = rows >= 0
        rows, term_of = rows[kept], term_of[kept]
        counts = np.bincount(term_of, minlength=slots)
        slot = self._slot
        added_slot: list[int] = []
        added_rows: list[np.ndarray] = []
        for key, their in fresh.items():
            k = slot.get(key)
            if k is None:
                if slot is self._slot:
                    slot = dict(slot)  # a new term: this generation's own copy, the old one stays as it was
                k = slot[key] = len(slot)
            added_slot.append(k)
            added_rows.append(fresh_at[their])
        if not added_rows:
            start = np.r_[0, np.cumsum(counts)].astype(np.int64)
            return Postings(slot, start, rows)
        # By slot: two slots' rows inserted at one place (the first has no kept rows) must keep the slots' order.
        by_slot = sorted(range(len(added_slot)), key=added_slot.__getitem__)
        added_slot = [added_slot[i] for i in by_slot]
        added_rows = [added_rows[i] for i in by_slot]
        new_counts = np.zeros(len(slot), np.int64)
        new_counts[:slots] = counts
        ends = np.r_[0, np.cumsum(new_counts)].astype(np.int64)[1:]  # where each slot's kept rows end
        at = np.concatenate([np.full(len(r), ends[k], np.int64) for k, r in zip(added_slot, added_rows, strict=True)])
        rows = np.insert(rows, at, np.concatenate(added_rows))  # each term's new rows after its kept ones
        np.add.at(new_counts, np.repeat(added_slot, [len(r) for r in added_rows]), 1)
        return Postings(slot, np.r_[0, np.cumsum(new_counts)].astype(np.int64), rows)


class RowIndex:
    """The table row of each illustration id; generations of one table share the numbering of ids."""

    __slots__ = ("_lock", "_number", "_row")

    def __init__(self, number: dict[str, int], row: np.ndarray, lock: threading.Lock) -> None:
        self._number = number  # id -> its number; shared across generations and only ever added to
        self._row = row  # number -> this table's row (-1: not in this table); numbers past its end are newer
        self._lock = lock

    @classmethod
    def of(cls, ids: Iterable[str]) -> RowIndex:
        number = {iid: n for n, iid in enumerate(ids)}
        return cls(number, np.arange(len(number), dtype=np.int64), threading.Lock())

    def get(self, illustration_id: str) -> int | None:
        n = self._number.get(illustration_id)
        if n is None or n >= len(self._row):
            return None
        row = int(self._row[n])
        return row if row >= 0 else None

    def rows_of(self, illustration_ids: Iterable[str], count: int = -1) -> np.ndarray:
        """The row of each id (int64), -1 for an id this table lacks."""
        numbers = np.fromiter(map(self._number.get, illustration_ids, repeat(-1)), np.int64, count)
        inside = (numbers >= 0) & (numbers < len(self._row))
        out = np.full(len(numbers), -1, np.int64)
        out[inside] = self._row[numbers[inside]]
        return out

    def moved(self, old_at: np.ndarray, fresh_ids: list[str], fresh_at: np.ndarray) -> RowIndex:
        """This index after the rows moved (``old_at``) and ``fresh_ids`` arrived at rows ``fresh_at``."""
        with self._lock:  # numbering new ids: one builder at a time (readers only ever look numbers up)
            numbers = [self._number.setdefault(iid, len(self._number)) for iid in fresh_ids]
            size = len(self._number)
        row = np.full(size, -1, np.int64)
        here = self._row >= 0
        row[: len(self._row)][here] = old_at[self._row[here]]
        row[np.asarray(numbers, np.int64)] = fresh_at
        return RowIndex(self._number, row, self._lock)
