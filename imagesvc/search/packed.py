"""Read-only string tables packed into a handful of objects, for dictionaries a process keeps for its whole life.

A dict of 100,000 short words keeps ~100 bytes a word (a str object, a dict slot, often an int or a tuple); here the
text of every key is one str, and a key costs its letters and two 4-byte numbers: the low 32 bits of its ``hash()``
(keys are kept sorted by them) and where its text starts. A lookup bisects the hashes that share the key's top bits
and compares the text of the one key (rarely a few) with the same 32 bits: ~0.5 µs, a dict's ~0.05 µs. ``hash()`` of
a str is fixed for the life of a process, which is all a table lives for. Nothing is changed after it is built, so
any number of threads may read a table at once.
"""

from __future__ import annotations

import ctypes
from array import array
from bisect import bisect_left
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import TypeVar

import numpy as np

__all__ = [
    "Keys",
    "Pooled",
    "Strings",
    "Table",
    "grouped",
    "int_table",
    "key_set",
    "keyed",
    "pooled",
    "release_freed_memory",
    "text_tables",
]

V = TypeVar("V")
_LOW_BITS = 0xFFFF_FFFF
_BUCKET_BITS = 12  # at most 4,096 runs of hashes by their top bits: 16 KB a table


def _u32(numbers: np.ndarray) -> array:
    """``numbers`` (each below 2**32) as an array of unsigned ints (4 bytes on every platform CPython supports)."""
    out = array("I")
    if out.itemsize == 4:
        out.frombytes(numbers.astype(np.uint32).tobytes())
    else:
        out.extend(numbers.tolist())
    return out


def _lengths(items: Sequence[str]) -> np.ndarray:
    return np.fromiter(map(len, items), dtype=np.int64, count=len(items))


class Strings(Sequence[str]):
    """Strings kept as one text and where each starts in it (4 bytes a string beside its letters)."""

    __slots__ = ("_starts", "_text")

    def __init__(self, items: Sequence[str], lengths: np.ndarray | None = None) -> None:
        """``items`` joined; ``lengths``, theirs, where the caller has them already."""
        self._text = "".join(items)
        ends = np.cumsum(_lengths(items) if lengths is None else lengths)
        self._starts = _u32(np.concatenate(([0], ends)))  # and where the last one ends

    def __len__(self) -> int:
        return len(self._starts) - 1

    def __getitem__(self, index: int) -> str:  # type: ignore[override]
        if not 0 <= index < len(self._starts) - 1:
            raise IndexError(index)
        return self._text[self._starts[index] : self._starts[index + 1]]


class Pooled(Sequence[str]):
    """A sequence of strings that repeat, each kept once in ``pool`` and named by its place there."""

    __slots__ = ("_ids", "_pool")

    def __init__(self, ids: array, pool: Strings) -> None:
        self._ids, self._pool = ids, pool

    def __len__(self) -> int:
        return len(self._ids)

    def __getitem__(self, index: int) -> str:  # type: ignore[override]
        return self._pool[self._ids[index]]


class Keys(Strings):
    """A frozen set of strings: kept in the order of their hashes' low 32 bits, those bits beside them, and where the
    hashes of each value of their top bits start (a lookup bisects a dozen or so hashes, not all of them)."""

    __slots__ = ("_buckets", "_hashes", "_shift")

    def __init__(self, keys: Sequence[str], hashes: np.ndarray, lengths: np.ndarray | None = None) -> None:
        """``keys`` in the order of their ``hashes`` (low 32 bits)."""
        super().__init__(keys, lengths)
        self._hashes = _u32(hashes)
        top_bits = min(_BUCKET_BITS, max(0, len(keys).bit_length() - 4))  # ~16 keys a bucket, at most 4,096 buckets
        self._shift = 32 - top_bits
        self._buckets = _u32(np.searchsorted(hashes, np.arange((1 << top_bits) + 1, dtype=np.int64) << self._shift))

    @classmethod
    def sorting(cls, keys: list[str]) -> tuple[Keys, np.ndarray]:
        """``keys`` (distinct) packed, and the order they are kept in: ``keys[order[i]]`` is kept at ``i``."""
        hashes = np.fromiter(map(hash, keys), dtype=np.int64, count=len(keys)) & _LOW_BITS
        order = np.argsort(hashes)
        ordered = np.array(keys, dtype=object)[order].tolist() if keys else []
        return cls(ordered, hashes[order], _lengths(keys)[order]), order

    def find(self, key: object) -> int:
        """Where ``key`` is kept (its values' index in a ``Table``), or -1."""
        if not isinstance(key, str):
            return -1
        bits, hashes, starts = hash(key) & _LOW_BITS, self._hashes, self._starts
        bucket = bits >> self._shift
        at = bisect_left(hashes, bits, self._buckets[bucket], self._buckets[bucket + 1])
        while at < len(hashes) and hashes[at] == bits:  # almost always one key, if any
            start = starts[at]
            if starts[at + 1] - start == len(key) and self._text.startswith(key, start):
                return at
            at += 1
        return -1

    def __contains__(self, key: object) -> bool:
        return self.find(key) >= 0


class Table(Mapping[str, V]):
    """A read-only mapping of strings to values, ``values[i]`` being the value of the key ``keys`` keeps at ``i``."""

    __slots__ = ("_keys", "_values")

    def __init__(self, keys: Keys, values: Sequence[V]) -> None:
        if len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys but {len(values)} values")
        self._keys, self._values = keys, values

    def __getitem__(self, key: str) -> V:
        at = self._keys.find(key)
        if at < 0:
            raise KeyError(key)
        return self._values[at]

    def get(self, key: str, default: V | None = None) -> V | None:  # type: ignore[override]
        at = self._keys.find(key)
        return default if at < 0 else self._values[at]

    def __contains__(self, key: object) -> bool:
        return self._keys.find(key) >= 0

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)


def key_set(words: Collection[str]) -> Keys:
    """``words`` as a packed frozen set."""
    return Keys.sorting(list(words))[0]


def keyed(table: Mapping[str, V]) -> tuple[Keys, list[V]]:
    """The keys of ``table`` packed, and its values in the order they are kept in."""
    keys, order = Keys.sorting(list(table))
    values = list(table.values())
    return keys, [values[i] for i in order.tolist()]


def grouped(keys: list[str], *columns: Sequence[int]) -> tuple[Keys, array, list[list[int]]]:
    """Rows grouped by key: ``keys`` the key of each row (repeated), ``columns`` the rows' numbers. Returns the
    distinct keys packed, where the rows of each start (and the last ones end), and each column in that order (a
    key's rows in the order they came)."""
    places: dict[str, int] = {}
    ids = _places(keys, places)
    distinct, order = Keys.sorting(list(places))
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    rows = np.argsort(position[ids], kind="stable")
    counts = np.bincount(ids, minlength=len(places))[order]
    starts = _u32(np.concatenate(([0], np.cumsum(counts))))
    return distinct, starts, [np.asarray(column, dtype=np.int64)[rows].tolist() for column in columns]


def _places(values: Iterable[str], places: dict[str, int]) -> np.ndarray:
    """Where each of ``values`` is in ``places`` (a pool of distinct values, each added on first sight)."""
    return np.fromiter((places.setdefault(value, len(places)) for value in values), dtype=np.int64)


def pooled(values: Iterable[str]) -> Pooled:
    """``values`` packed, each distinct one kept once."""
    places: dict[str, int] = {}
    ids = _u32(_places(values, places))
    return Pooled(ids, Strings(list(places)))


def text_tables(*tables: Mapping[str, str]) -> list[Table[str]]:
    """Each of ``tables`` (str to str) packed, their values kept once for all of them."""
    places: dict[str, int] = {}
    packed = []
    for table in tables:
        keys, order = Keys.sorting(list(table))
        packed.append((keys, _u32(_places(table.values(), places)[order])))
    pool = Strings(list(places))
    return [Table(keys, Pooled(ids, pool)) for keys, ids in packed]


def int_table(table: Mapping[str, int]) -> Table[int]:
    """``table`` (str to int) packed: 4 bytes a number where all are from 0 to 2**32 - 1, else 8."""
    keys, order = Keys.sorting(list(table))
    numbers = np.fromiter(table.values(), dtype=np.int64, count=len(table))[order]
    small = not len(numbers) or (numbers.min() >= 0 and numbers.max() <= _LOW_BITS)
    return Table(keys, _u32(numbers) if small else array("q", numbers.tolist()))


def release_freed_memory() -> None:
    """Give the system back the heap that building tables freed: glibc's allocator keeps freed memory inside the
    process (a lexicon's build frees several times what it keeps), ``malloc_trim`` returns its free pages. Where there
    is no glibc, nothing."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError, TypeError):
        return
    trim(0)
