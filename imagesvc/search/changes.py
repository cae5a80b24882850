"""Following the catalog book by book: a node's gallery table brought up to date with the books written since it was
read, instead of reading every illustration again after each write.

``gallery_changes`` (migration 10) holds, per book, the number of the last write that changed what the table reads
of it; a table remembers the highest number read before its rows (``GalleryTable.seq``). ``updated_table`` reads the
books above it, only their illustrations, and splices them into a new table equal to a whole read at that moment:
the same rows in the same (catalog) order, the same columns, postings and near-duplicate groups (type codes may be
numbered differently; they are looked up by name). The old table is left as it is: requests ranking on it finish on
it. Blocking: run it in a worker thread.
"""

from __future__ import annotations

import itertools
import weakref
from bisect import bisect_left
from collections.abc import Callable
from typing import Any

import numpy as np

from imagesvc.search.duplicates import groups_of_values, regrouped
from imagesvc.search.ranking import GalleryTable, changes_seq, table_sql

__all__ = ["MAX_BOOKS", "changed_books", "splice", "updated_table"]

MAX_BOOKS = 1_000  # changed books past which the whole table is read again (a bulk ingest, a restored catalog)
_CHUNK = 500  # book ids in one IN (...)


def changed_books(catalog: Any, since: int) -> list[str] | None:
    """The books written since change number ``since``, sorted; None when more than ``MAX_BOOKS``."""
    rows = catalog.tuples(
        "SELECT book_id FROM gallery_changes WHERE seq > ? ORDER BY seq LIMIT ?", (since, MAX_BOOKS + 1)
    )
    return None if len(rows) > MAX_BOOKS else sorted({r[0] for r in rows})


def updated_table(
    catalog: Any, table: GalleryTable, vector_row: Callable[[str], int | None] | None = None
) -> GalleryTable | None:
    """``table`` brought up to date with the catalog: itself when nothing it reads was written since, else a new
    table; None when the whole table should be read again (too many books changed, or the change numbers went back:
    another catalog). ``vector_row`` gives a new illustration's row in the vector matrix ``table.vec_row`` points
    into (None: not in it)."""
    seq = changes_seq(catalog)
    if seq == table.seq:
        return table
    if seq < table.seq:
        return None
    books = changed_books(catalog, table.seq)
    if books is None:
        return None
    rows: list[tuple[Any, ...]] = []
    for start in range(0, len(books), _CHUNK):  # sorted chunks, each read in catalog order: the whole is in order
        chunk = books[start : start + _CHUNK]
        where = "WHERE i.book_id IN ({})".format(",".join("?" * len(chunk)))
        rows += catalog.tuples(table_sql(catalog, where), chunk)
    fresh = GalleryTable.from_rows(rows, with_rowid=table.rowid is not None)
    out = splice(table, books, fresh, vector_row)
    out.seq = seq
    out.exact = changes_seq(catalog) == seq  # nothing written while the books were read
    return out


def _spliced(old: list[str], kept: np.ndarray, at: np.ndarray, fresh: list[str]) -> list[str]:
    """``old``'s items at the ``kept`` rows (sorted) with ``fresh[j]`` inserted before kept position ``at[j]`` (sorted):
    the same list as ``np.insert(old[kept], at, fresh)``, made of slices of ``old``, since kept rows come in runs (a
    book's rows are contiguous), so the Python work is in proportion to the runs, not to the rows."""
    cuts = np.union1d(np.flatnonzero(np.diff(kept) != 1) + 1, at)
    cuts = np.union1d(cuts, [0, len(kept)]).tolist()
    places = at.tolist()
    out: list[str] = []
    j = 0
    for a, b in itertools.pairwise(cuts):
        while j < len(places) and places[j] == a:
            out.append(fresh[j])
            j += 1
        if b > a:
            out += old[int(kept[a]) : int(kept[b - 1]) + 1]
    out += fresh[j:]  # those placed after the last kept row
    return out


def _groups(
    old: GalleryTable,
    kept: np.ndarray,
    carried: np.ndarray,
    values: np.ndarray,
    present: np.ndarray,
    bits: int,
    fresh_at: np.ndarray,
) -> np.ndarray:
    """The new table's near-duplicate groups: made again where the change reaches (``duplicates.regrouped``)."""
    gone = np.ones(len(old), bool)
    gone[kept] = False
    lost = np.unique(old.group[gone])
    again = regrouped(carried, values, present, bits, fresh_at, lost[lost >= 0])
    return again if again is not None else groups_of_values(values, present, bits)


def splice(
    old: GalleryTable, changed: list[str], fresh: GalleryTable, vector_row: Callable[[str], int | None] | None = None
) -> GalleryTable:
    """``old`` with every row of the ``changed`` books (sorted ids) replaced by ``fresh``'s (those books' rows as
    they are now, in catalog order; a book with none is gone).

    Columns are gathered and inserted whole (numpy), and the look-ups follow the moved rows (``table_index``): the
    Python work is in proportion to the changed books, not to the table."""
    code_of = {b: i for i, b in enumerate(old.book_ids)}
    keep_book = np.ones(len(old.book_ids), bool)
    keep_book[[code_of[b] for b in changed if b in code_of]] = False
    kept = np.flatnonzero(keep_book[old.book]) if len(old) else np.zeros(0, np.int64)
    kept_books = [b for b, k in zip(old.book_ids, keep_book.tolist(), strict=True) if k]
    counts = np.bincount(old.book[kept], minlength=len(old.book_ids))[keep_book]
    before = np.r_[0, np.cumsum(counts)]  # kept rows before the k-th kept book
    # Each fresh book's rows go where its id sorts among the kept books (book ids order the table first).
    offset = np.array([before[bisect_left(kept_books, b)] for b in fresh.book_ids], np.int64)
    at = offset[fresh.book] if len(fresh) else np.zeros(0, np.int64)  # each fresh row's place among the kept rows
    assert not len(at) or bool((np.diff(at) >= 0).all()), "fresh rows come in catalog order"

    def column(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.insert(a[kept], at, b)

    size = len(kept) + len(fresh)
    fresh_at = at + np.arange(len(fresh), dtype=np.int64)  # fresh row j's new row (np.insert's placement)
    old_at = np.full(len(old), -1, np.int64)  # each old row's new row (-1: replaced)
    is_fresh = np.zeros(size, bool)
    is_fresh[fresh_at] = True
    old_at[kept] = np.flatnonzero(~is_fresh)

    book_ids = sorted(kept_books + fresh.book_ids)
    code = {b: i for i, b in enumerate(book_ids)}
    old_code = np.array([code.get(b, -1) for b in old.book_ids], np.int32)
    fresh_code = np.array([code[b] for b in fresh.book_ids], np.int32)
    types = list(old.types)
    type_code = {t: i for i, t in enumerate(types)}
    for t in fresh.types:
        if t not in type_code:
            type_code[t] = len(types)
            types.append(t)
    fresh_type = np.array([type_code[t] for t in fresh.types], np.int32)

    assert old.phash is not None and fresh.phash is not None
    assert old.phash_width is not None and fresh.phash_width is not None
    phash = column(old.phash, fresh.phash)
    width = column(old.phash_width, fresh.phash_width)
    present = width > 0
    bits = min(int(width[present].max()), 64) if present.any() else 64
    vec_row = None
    if old.vec_row is not None:
        look = vector_row or (lambda _iid: None)
        found = (look(iid) for iid in fresh.ids)
        vec_row = column(old.vec_row, np.fromiter((-1 if r is None else r for r in found), np.int64, len(fresh)))
    ids = _spliced(old.ids, kept, at, fresh.ids)
    table = GalleryTable(
        ids=ids,
        book=column(old_code[old.book], fresh_code[fresh.book]),
        book_ids=book_ids,
        type=column(old.type, fresh_type[fresh.type]),
        types=types,
        year=column(old.year, fresh.year),
        live=column(old.live, fresh.live),
        group=_groups(old, kept, column(old.group, np.full(len(fresh), -1, np.int32)), phash, present, bits, fresh_at),
        terms=old.terms.moved(old_at, fresh.terms, fresh_at),
        vec_row=vec_row,
        rowid=None if old.rowid is None or fresh.rowid is None else column(old.rowid, fresh.rowid),
        phash=phash,
        phash_width=width,
    )
    table._row = old.row_index.moved(old_at, fresh.ids, fresh_at)
    table._moved_from = (weakref.ref(old), old_at)
    return table
