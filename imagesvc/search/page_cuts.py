"""Cutting a page from ranked gallery candidates (per-book caps, a partial sort that grows as caps use it up), and
the fast path for a likeness query with no filter but exclusions and ``min_score``.

Such a query ranks every live illustration that has a vector, so it needs nothing but the matrix product and a
partial sort of its scores, in the matrix's own row order: no mask over the table, no gather of 200,000 scores into
catalog order, no per-query copies. Everything that does not change between queries (each matrix row's live table
row and book, the books' row counts, each near-duplicate group's rows) is worked out once per table and matrix size
(``Prepared``). The results are exactly those of the general path in ``gallery.rank`` (tests/search/
test_rank_property.py compares both with a full sort).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from imagesvc.search.ranking import GalleryTable, Query

__all__ = ["Prepared", "listing_positions", "page_positions", "prepared", "rank_unfiltered", "within_cap"]

_LOCK = threading.Lock()


@dataclass(frozen=True)
class Prepared:
    """Per-table arrays indexed by matrix row (the table's ``vec_row`` maps table rows to these)."""

    sources: tuple[np.ndarray, ...]  # the table's vec_row, live, book and group these were built from
    matrix_rows: int
    table_row: np.ndarray  # int64: the table row of each matrix row, -1 when none
    alive: np.ndarray  # bool: the matrix row belongs to a live illustration (a candidate of an unfiltered query)
    dead: np.ndarray  # int64: the matrix rows that are not
    book: np.ndarray  # int64 book code of each matrix row (0 where not alive)
    book_counts: np.ndarray  # int64 per book: its alive rows
    group_start: np.ndarray  # near-duplicate group g's alive table rows are group_rows[group_start[g]:...[g + 1]]
    group_rows: np.ndarray

    @classmethod
    def build(cls, table: GalleryTable, matrix_rows: int) -> Prepared:
        assert table.vec_row is not None
        has = np.flatnonzero((table.vec_row >= 0) & table.live)
        table_row = np.full(matrix_rows, -1, np.int64)
        table_row[table.vec_row[has]] = has
        alive = table_row >= 0
        book = np.zeros(matrix_rows, np.int64)
        book[alive] = table.book[table_row[alive]]
        grouped = has[table.group[has] >= 0]
        grouped = grouped[np.argsort(table.group[grouped], kind="stable")]
        groups = int(table.group.max()) + 1 if len(table) else 0
        sizes = np.bincount(table.group[grouped], minlength=groups)
        return cls(
            sources=_sources(table),
            matrix_rows=matrix_rows,
            table_row=table_row,
            alive=alive,
            dead=np.flatnonzero(~alive),
            book=book,
            book_counts=np.bincount(book[alive], minlength=len(table.book_ids)),
            group_start=np.r_[0, np.cumsum(sizes)],
            group_rows=grouped,
        )


def prepared(table: GalleryTable, matrix_rows: int) -> Prepared:
    """``table``'s ``Prepared`` for a matrix of ``matrix_rows`` rows, built on first use and kept on the table.

    The table's columns are made read-only then: a table is not edited once it ranks (build a new one)."""
    hit = table._prepared
    same = hit is not None and all(a is b for a, b in zip(hit.sources, _sources(table), strict=True))
    if hit is not None and same and hit.matrix_rows == matrix_rows:
        return hit
    with _LOCK:
        hit = Prepared.build(table, matrix_rows)
        for column in hit.sources:
            column.flags.writeable = False
        table._prepared = hit
    return hit


def _sources(table: GalleryTable) -> tuple[np.ndarray, ...]:
    assert table.vec_row is not None
    return (table.vec_row, table.live, table.book, table.group)


def within_cap(order: np.ndarray, books: np.ndarray, cap: int) -> np.ndarray:
    """The entries of ``order`` (ranked rows) that are among the first ``cap`` of their book."""
    if len(order) == 0:
        return order
    by_book = np.argsort(books, kind="stable")
    sorted_books = books[by_book]
    starts = np.flatnonzero(np.r_[True, sorted_books[1:] != sorted_books[:-1]])
    lengths = np.diff(np.r_[starts, len(sorted_books)])
    position = np.empty(len(order), np.int64)
    position[by_book] = np.arange(len(order)) - np.repeat(starts, lengths)
    return order[position < cap]


def _top(score: np.ndarray, m: int) -> np.ndarray:
    """Matrix rows scoring at least the ``m``-th best score (so exact ties at the cut stay together)."""
    top = np.argpartition(score, len(score) - m)[len(score) - m :]
    threshold = score[top].min()
    return top if np.count_nonzero(score >= threshold) == m else np.flatnonzero(score >= threshold)


def rank_unfiltered(
    table: GalleryTable, q: Query, matrix: np.ndarray, vector: np.ndarray, first_cut: int
) -> tuple[list[int], list[float], int, list[list[int]]]:
    """Table rows of one page, their scores, the total and each row's near-duplicates, for a query with no filter,
    no text scores, no folding and no cursor (see ``gallery.rank``)."""
    p = prepared(table, len(matrix))
    score = matrix @ vector
    keep, counts, eligible = p.alive, p.book_counts, int(len(p.table_row) - len(p.dead))
    excluded = table.rows_of(q.exclude_ids or (), len(q.exclude_ids or ()))
    gone = table.vec_row[excluded[excluded >= 0]]
    gone = gone[gone >= 0]
    gone = np.unique(gone[p.alive[gone]]) if len(gone) else gone
    if q.min_score is not None or len(gone):
        keep = p.alive.copy()
        keep[gone] = False
        if q.min_score is not None:
            keep &= score >= q.min_score
        counts = np.bincount(p.book[keep], minlength=len(table.book_ids))
        eligible = int(np.count_nonzero(keep))
        score[~keep] = -np.inf
    elif len(p.dead):
        score[p.dead] = -np.inf
    total = int(np.minimum(counts, q.max_per_book).sum())
    need = q.offset + q.limit
    m = max(4 * need, first_cut)
    while True:
        part = np.flatnonzero(keep) if m >= eligible else _top(score, m)
        part = part[keep[part]]
        rows = p.table_row[part]
        order = np.lexsort((rows, -score[part]))
        part, rows = part[order], rows[order]
        kept = within_cap(np.arange(len(part)), p.book[part], q.max_per_book)
        if len(kept) >= need or m >= eligible:
            break
        m *= 4
    page = kept[q.offset : need]
    scores = [round(float(s), 6) for s in score[part[page]]]
    out = rows[page].tolist()
    return out, scores, total, [_members(table, p, score, keep, r) for r in out]


def _members(table: GalleryTable, p: Prepared, score: np.ndarray, keep: np.ndarray, row: int) -> list[int]:
    """The other candidates of ``row``'s near-duplicate group, best first (then catalog order)."""
    g = int(table.group[row])
    if g < 0:
        return []
    rows = p.group_rows[p.group_start[g] : p.group_start[g + 1]]
    vec = table.vec_row[rows]
    rows, vec = rows[keep[vec]], vec[keep[vec]]
    return [int(r) for r in rows[np.lexsort((rows, -score[vec]))] if r != row]


def listing_positions(cand: np.ndarray, books: np.ndarray, q: Query, start: int) -> tuple[np.ndarray, bool]:
    """Positions into ``cand`` (rows in catalog order) of one unranked page from table row ``start`` on, and
    whether more follow. The per-book cap counts from each book's first row, so pages never overlap."""
    kept = within_cap(np.arange(len(cand)), books, q.max_per_book)
    if start:
        kept = kept[cand[kept] >= start]
    need = q.offset + q.limit
    return kept[q.offset : need], len(kept) > need


def page_positions(cand: np.ndarray, books: np.ndarray, score: np.ndarray, q: Query, first_cut: int) -> np.ndarray:
    """Positions into ``cand`` of the requested page, in rank order (score, then catalog order)."""
    need, n = q.offset + q.limit, len(cand)
    m = min(n, max(4 * need, first_cut))
    while True:
        if m < n:
            # Everything scoring at least the m-th best: a superset that keeps exact ties together. The values alone
            # are partitioned (argpartition also moves indices, and needs the scores negated: a copy).
            threshold = np.partition(score, n - m)[n - m]
            part = np.flatnonzero(score >= threshold)
        else:
            part = np.arange(n)
        order = part[np.lexsort((cand[part], -score[part]))]
        kept = within_cap(order, books[order], q.max_per_book)
        if len(kept) >= need or len(part) == n:
            return kept[q.offset : need]
        m = min(n, m * 4)
