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

from bisect import bisect_left
from collections.abc import Callable
from typing import Any

import numpy as np

from imagesvc.search.duplicates import groups_of_values
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


def _gather(old: np.ndarray, new: np.ndarray, src: np.ndarray, is_old: np.ndarray) -> np.ndarray:
    out = np.empty(len(src), old.dtype)
    out[is_old] = old[src[is_old]]
    out[~is_old] = new[-1 - src[~is_old]]
    return out


def splice(
    old: GalleryTable, changed: list[str], fresh: GalleryTable, vector_row: Callable[[str], int | None] | None = None
) -> GalleryTable:
    """``old`` with every row of the ``changed`` books (sorted ids) replaced by ``fresh``'s (those books' rows as
    they are now, in catalog order; a book with none is gone)."""
    code_of = {b: i for i, b in enumerate(old.book_ids)}
    keep_book = np.ones(len(old.book_ids), bool)
    keep_book[[code_of[b] for b in changed if b in code_of]] = False
    kept = np.flatnonzero(keep_book[old.book]) if len(old) else np.zeros(0, np.int64)
    kept_books = [b for b, k in zip(old.book_ids, keep_book.tolist(), strict=True) if k]
    counts = np.bincount(old.book[kept], minlength=len(old.book_ids))[keep_book]
    before = np.r_[0, np.cumsum(counts)]  # kept rows before the k-th kept book
    # Each fresh book's rows go where its id sorts among the kept books (book ids order the table first).
    offset = np.array([before[bisect_left(kept_books, b)] for b in fresh.book_ids], np.int64)
    src = np.insert(kept, offset[fresh.book] if len(fresh) else np.zeros(0, np.int64), -1 - np.arange(len(fresh)))
    is_old = src >= 0

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

    def column(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
        return None if a is None or b is None else _gather(a, b, src, is_old)

    phash = column(old.phash, fresh.phash)
    width = column(old.phash_width, fresh.phash_width)
    assert phash is not None and width is not None
    present = width > 0
    bits = min(int(width[present].max()), 64) if present.any() else 64
    old_at = np.full(len(old), -1, np.int64)  # each old row's new row (-1: replaced)
    old_at[src[is_old]] = np.flatnonzero(is_old)
    fresh_at = np.flatnonzero(~is_old)  # fresh row j's new row
    terms: dict[tuple[str, str], np.ndarray] = {}
    for key, rows in old.terms.items():
        moved = old_at[rows]
        moved = moved[moved >= 0]
        if len(moved):
            terms[key] = moved
    for key, rows in fresh.terms.items():
        terms[key] = np.sort(np.concatenate([terms.get(key, np.zeros(0, np.int64)), fresh_at[rows]]))
    vec_row = None
    if old.vec_row is not None:
        look = vector_row or (lambda _iid: None)
        found = (look(iid) for iid in fresh.ids)
        vec_row = _gather(old.vec_row, np.fromiter((-1 if r is None else r for r in found), np.int64), src, is_old)
    return GalleryTable(
        ids=[old.ids[s] if s >= 0 else fresh.ids[-1 - s] for s in src.tolist()],
        book=_gather(old_code[old.book], fresh_code[fresh.book], src, is_old),
        book_ids=book_ids,
        type=_gather(old.type, fresh_type[fresh.type], src, is_old),
        types=types,
        year=_gather(old.year, fresh.year, src, is_old),
        live=_gather(old.live, fresh.live, src, is_old),
        group=groups_of_values(phash, present, bits),
        terms=terms,
        vec_row=vec_row,
        rowid=column(old.rowid, fresh.rowid),
        phash=phash,
        phash_width=width,
    )
