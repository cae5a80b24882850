"""Gallery ranking: filters first, then CLIP and text scores fused, near-duplicates folded (when asked),
``maxPerBook``, paging by offset or, for the unranked listing, by a keyset cursor that reaches any depth.

Everything here is numpy over a ``GalleryTable`` (one row per illustration, catalog order) and the vector matrix, so
a query over 200,000 illustrations costs one matrix-vector product plus linear passes; see docs/search.md.
"""

from __future__ import annotations

import json
import weakref
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from imagesvc.catalog import illustration_key
from imagesvc.search.duplicates import fold_groups, groups_of_values, parse_hashes
from imagesvc.search.page_cuts import Prepared, listing_positions, page_positions, rank_unfiltered
from imagesvc.search.table_index import Postings, RowIndex

__all__ = ["TEXT_WEIGHT", "GalleryTable", "Query", "Ranked", "TextScores", "changes_seq", "rank", "table_sql"]

TEXT_WEIGHT = 0.1  # a full-strength text match adds this much to a cosine similarity (see docs/search.md)
NO_YEAR = -(2**31)
FIRST_CUT = 512  # candidates a ranked page first sorts; more when per-book caps or folding use them up
_TERM_FIELDS = ("subjects", "figures", "symbols")


@dataclass
class Query:
    """One gallery query; every filter narrows the candidates before anything is ranked."""

    text: str | None = None
    like: str | None = None
    type: str | None = None
    subject: str | None = None
    figure: str | None = None
    symbol: str | None = None
    year_from: int | None = None
    year_to: int | None = None
    book_ids: tuple[str, ...] | None = None
    in_ids: frozenset[str] | None = None  # a collection's members
    exclude_ids: frozenset[str] | None = None  # negative query terms matched these
    max_per_book: int = 3
    limit: int = 20
    offset: int = 0
    min_score: float | None = None
    fold_duplicates: bool = False  # show one of each near-duplicate group (the rest in its ``duplicates``)
    after: str | None = None  # keyset cursor: the listing continues after this illustration id (unranked only)


@dataclass
class GalleryTable:
    """Columns of every illustration (live or not) and where its vector sits in the matrix (-1: none)."""

    ids: list[str]
    book: np.ndarray  # int32 codes into book_ids
    book_ids: list[str]
    type: np.ndarray  # int32 codes into types
    types: list[str]
    year: np.ndarray  # int32, NO_YEAR when unknown
    live: np.ndarray  # bool
    group: np.ndarray  # int32 near-duplicate group (pHash within a few bits), -1 when alone
    terms: Postings = field(default_factory=lambda: Postings.of({}))  # a dict of term -> rows is taken too
    vec_row: np.ndarray | None = None
    rowid: np.ndarray | None = None  # int64 number of each row keyword queries name (SQLite rowid, search_num)
    phash: np.ndarray | None = None  # uint64 perceptual hash of each row (what ``group`` was made from)
    phash_width: np.ndarray | None = None  # int16 its width in bits, 0 where it has none (or a malformed one)
    seq: int = 0  # the gallery_changes number read before the rows: every later write has a higher one
    exact: bool = False  # whether the rows are the catalog's at ``seq`` exactly (nothing written while reading)
    _row: RowIndex | None = None
    _keys: list[tuple[str, int, int]] | None = None
    _prepared: Prepared | None = None  # arrays for unfiltered likeness queries (page_cuts.py), built on first use
    _by_rowid: tuple[np.ndarray, np.ndarray] | None = None  # rowids sorted, and the row of each
    # The table this one was spliced from (weakly: it is not kept alive for this) and where its rows went.
    _moved_from: tuple[weakref.ref[GalleryTable], np.ndarray] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.terms, Postings):
            self.terms = Postings.of(self.terms)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def row_index(self) -> RowIndex:
        """The id -> row look-up, built on first use (a spliced table gets its own from the table it came from)."""
        if self._row is None:
            self._row = RowIndex.of(self.ids)
        return self._row

    def row_of(self, illustration_id: str) -> int | None:
        return self.row_index.get(illustration_id)

    def rows_of(self, illustration_ids: Iterable[str], count: int = -1) -> np.ndarray:
        """The table row of each id (int64), -1 for an id the table lacks; ``count``: how many ids, when known."""
        return self.row_index.rows_of(illustration_ids, count)

    def rows_following(self, previous: GalleryTable, rows: np.ndarray, ids: list[str]) -> np.ndarray | None:
        """``self.rows_of(ids)`` worked out from ``rows``, what ``previous`` answered for the same ``ids``, when this
        table was spliced from ``previous``: a gather, and a look-up only for the ids ``previous`` lacked. None when
        this table was not made from ``previous``."""
        if self._moved_from is None or self._moved_from[0]() is not previous:
            return None
        old_at = self._moved_from[1]
        out = np.where(rows >= 0, old_at[np.maximum(rows, 0)], -1)
        missing = np.flatnonzero(out < 0)
        if len(missing):
            out[missing] = self.rows_of((ids[i] for i in missing.tolist()), len(missing))
        return out

    def rows_of_rowids(self, rowids: np.ndarray) -> np.ndarray:
        """The table row of each rowid (``rowid``'s numbers, int64), -1 for one the table lacks."""
        assert self.rowid is not None
        if self._by_rowid is None:
            order = np.argsort(self.rowid, kind="stable")
            self._by_rowid = (self.rowid[order], order)
        ordered, rows = self._by_rowid
        at = np.minimum(np.searchsorted(ordered, rowids), max(len(ordered) - 1, 0))
        if not len(ordered):
            return np.full(len(rowids), -1, np.int64)
        return np.where(ordered[at] == rowids, rows[at], -1).astype(np.int64)

    def first_after(self, cursor: str) -> int:
        """The first row after illustration ``cursor`` in table (catalog) order, even if that one is gone since.

        Raises ``ValueError`` for a cursor that is not an illustration id."""
        row = self.row_of(cursor)
        if row is not None:
            return row + 1
        key = illustration_key(cursor)
        if self._keys is None:
            self._keys = [illustration_key(i) for i in self.ids]
        return bisect_right(self._keys, key)

    def attach(self, index_ids: list[str]) -> None:
        """Map each row to its row in a vector matrix holding ``index_ids``."""
        where = {iid: i for i, iid in enumerate(index_ids)}
        self.vec_row = np.array([where.get(iid, -1) for iid in self.ids], dtype=np.int64)

    @classmethod
    def from_catalog(cls, catalog: Any) -> GalleryTable:
        """The table of every illustration, read row by row (a worker thread builds it beside the one in use)."""
        seq = changes_seq(catalog)
        table = cls.from_rows(catalog.stream(table_sql(catalog)))
        table.seq = seq
        table.exact = changes_seq(catalog) == seq  # nothing written meanwhile: its rowids are FTS5's at seq
        return table

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[Any, ...]], with_rowid: bool | None = None) -> GalleryTable:
        """The table of ``rows`` (``table_sql``'s columns, in its order)."""
        ids: list[str] = []
        book: list[int] = []
        kind: list[int] = []
        year: list[int] = []
        live: list[bool] = []
        phashes: list[str | None] = []
        rowids: list[int] = []
        books: dict[str, int] = {}
        types: dict[str, int] = {}
        postings: dict[tuple[str, str], list[int]] = defaultdict(list)
        for n, (iid, book_id, type_, year_, phash, alive, *terms, rowid) in enumerate(rows):
            ids.append(iid)
            book.append(books.setdefault(book_id, len(books)))
            kind.append(types.setdefault(type_, len(types)))
            year.append(NO_YEAR if year_ is None else year_)
            live.append(bool(alive))
            phashes.append(phash)
            rowids.append(-1 if rowid is None else rowid)
            for name, text in zip(_TERM_FIELDS, terms, strict=True):
                if text and text != "[]":
                    for value in {str(v).casefold() for v in json.loads(text) or ()}:
                        postings[(name, value)].append(n)
        has_rowid = with_rowid if with_rowid is not None else bool(rowids) and rowids[0] >= 0
        values, present, bits = parse_hashes(phashes)
        width = np.fromiter((4 * len(h) if h else 0 for h in phashes), np.int16, len(phashes))
        return cls(
            ids=ids,
            book=np.array(book, np.int32),
            book_ids=list(books),
            type=np.array(kind, np.int32),
            types=list(types),
            year=np.array(year, np.int32),
            live=np.array(live, bool),
            group=groups_of_values(values, present, bits),
            terms=Postings.of(postings),
            rowid=np.array(rowids, np.int64) if has_rowid else None,
            phash=values,
            phash_width=np.where(present, width, 0).astype(np.int16),
        )


def table_sql(catalog: Any, where: str = "") -> str:
    """The gallery table's read: every illustration (``where``: some), in catalog order, with the number keyword
    queries name it by (SQLite's rowid; PostgreSQL's ``search_num``, migration 12)."""
    rowid = "i.rowid" if getattr(catalog, "dialect", "sqlite") == "sqlite" else "i.search_num"
    return (
        "SELECT i.id, i.book_id, i.type, coalesce(i.year, b.year), i.phash, (i.removed = 0 AND b.withdrawn = 0),"
        f" i.subjects, i.figures, i.symbols, {rowid} FROM illustrations i"
        f" JOIN books b ON b.id = i.book_id {where} ORDER BY i.book_id, i.page_number, i.idx"
    )


def changes_seq(catalog: Any) -> int:
    """The highest ``gallery_changes`` number: it moves with every write the gallery table reads (migration 10)."""
    return int(catalog.scalar("SELECT coalesce(max(seq), 0) FROM gallery_changes") or 0)


@dataclass
class Ranked:
    """One page of results as table rows, with the scores that ordered them and the totals for paging."""

    rows: list[int]
    total: int
    similarity: list[float | None]
    clip: list[float | None]
    text: list[float | None]
    duplicates: list[list[int]]
    more: bool = False  # whether results follow this page


def _mask(table: GalleryTable, q: Query) -> np.ndarray:
    mask = table.live.copy()
    if q.type is not None:
        code = table.types.index(q.type) if q.type in table.types else -1
        mask &= table.type == code
    for name, value in (("subjects", q.subject), ("figures", q.figure), ("symbols", q.symbol)):
        if value is not None:
            hit = np.zeros(len(table), bool)
            hit[table.terms.get((name, value.casefold()), np.zeros(0, np.int64))] = True
            mask &= hit
    if q.year_from is not None:
        mask &= (table.year >= q.year_from) & (table.year != NO_YEAR)
    if q.year_to is not None:
        mask &= (table.year <= q.year_to) & (table.year != NO_YEAR)
    if q.book_ids is not None:
        codes = [table.book_ids.index(b) for b in q.book_ids if b in table.book_ids]
        mask &= np.isin(table.book, codes)
    if q.in_ids is not None:
        hit = np.zeros(len(table), bool)
        rows = table.rows_of(q.in_ids, len(q.in_ids))
        hit[rows[rows >= 0]] = True
        mask &= hit
    if q.exclude_ids:
        rows = table.rows_of(q.exclude_ids, len(q.exclude_ids))
        mask[rows[rows >= 0]] = False
    return mask


TextScores = dict[str, float] | tuple[np.ndarray, np.ndarray]
"""Text scores by illustration id, or as (table rows, scores) arrays."""


def _unfiltered(q: Query, text_scores: TextScores | None) -> bool:
    """Whether every live illustration with a vector is a candidate (bar exclusions and ``min_score``)."""
    filters = (q.type, q.subject, q.figure, q.symbol, q.year_from, q.year_to, q.book_ids, q.in_ids, q.after)
    return text_scores is None and not q.fold_duplicates and all(f is None for f in filters)


def rank(
    table: GalleryTable,
    q: Query,
    matrix: np.ndarray | None = None,
    vector: np.ndarray | None = None,
    text_scores: TextScores | None = None,
) -> Ranked:
    """Filter, score, fold duplicates (``q.fold_duplicates``), cap per book and cut one page. With neither
    ``vector`` nor ``text_scores`` the order is the catalog's and ``q.after`` continues it after that id; with only
    text, non-matching candidates are dropped. Raises ``ValueError`` for ``q.after`` on a ranked query."""
    if vector is not None and matrix is not None and table.vec_row is not None and _unfiltered(q, text_scores):
        rows, scores, total, duplicates = rank_unfiltered(table, q, matrix, vector, FIRST_CUT)
        more = q.offset + len(rows) < total
        return Ranked(rows, total, scores, list(scores), [None] * len(rows), duplicates, more)
    cand = np.flatnonzero(_mask(table, q))
    clip = text = None
    if vector is not None and matrix is not None and table.vec_row is not None:
        vr = table.vec_row[cand]
        cand, vr = cand[vr >= 0], vr[vr >= 0]
        # A gather copies rows; past a quarter of the matrix one full product is cheaper.
        clip = (matrix @ vector)[vr] if len(vr) > len(matrix) // 4 else matrix[vr] @ vector
    if text_scores is not None:
        dense = np.zeros(len(table), np.float32)
        if isinstance(text_scores, tuple):
            dense[text_scores[0]] = text_scores[1]
        else:
            rows = table.rows_of(text_scores, len(text_scores))
            found = rows >= 0
            dense[rows[found]] = np.fromiter(text_scores.values(), np.float64, len(text_scores))[found]
        text = dense[cand]
        if clip is None:
            keep = text > 0
            cand, text = cand[keep], text[keep]
    score = None
    if clip is not None:
        score = clip + TEXT_WEIGHT * text if text is not None else clip
    elif text is not None:
        score = text
    if score is not None and q.min_score is not None:
        keep = score >= q.min_score
        cand, score = cand[keep], score[keep]
        clip = clip[keep] if clip is not None else None
        text = text[keep] if text is not None else None
    if q.after is not None and score is not None:
        raise ValueError("a cursor continues the unranked listing only")
    keep_mask, members = fold_groups(table.group, cand, score)
    if not q.fold_duplicates:
        keep_mask = np.ones(len(cand), bool)  # every illustration stands for itself; groups only annotate
    cand = cand[keep_mask]
    sel = np.flatnonzero(keep_mask)
    books = table.book[cand]
    total = int(np.minimum(np.bincount(books), q.max_per_book).sum()) if len(cand) else 0
    if score is None:
        page_pos, more = listing_positions(cand, books, q, table.first_after(q.after) if q.after is not None else 0)
    else:
        page_pos = page_positions(cand, books, score[sel], q, FIRST_CUT)
        more = q.offset + len(page_pos) < total
    pick = sel[page_pos]

    def values(arr: np.ndarray | None) -> list[float | None]:
        return [None if arr is None else round(float(arr[i]), 6) for i in pick]

    rows = cand[page_pos].tolist()
    return Ranked(
        rows=rows,
        total=total,
        similarity=values(score),
        clip=values(clip),
        text=values(text),
        duplicates=[[m for m in members.get(int(table.group[r]), []) if m != r] for r in rows],
        more=more,
    )
