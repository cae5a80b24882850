"""The SQLite full-text index of page text (OCR, translation, original): its table, its upkeep, its one query.

An FTS5 table without content of its own (the text lives in ``pages``), fed text folded by ``text_fold.index_text``
so that Hebrew, Arabic, Latin with accents or long s, and Chinese written without spaces all meet their queries.
Each text of a page is one row, with row id ``book number << 22 | page << 2 | field``; the book's number is kept in
``page_text_books``. The texts of one book are one contiguous row-id range, and a search inside a book asks FTS5
only one-term queries over that range: each reads just that stretch of the term's list, however common the term is
in the rest of the library. (FTS5 walks on past a range's end for a phrase, a column filter or NEAR until the next
match anywhere: 71 ms for a phrase the book lacks at 180,000 pages; and its bm25 counts each term's pages across the
whole library on every query, 47 ms for a word of every translation. Neither is used.)

This module is the SQLite dialect of page search; PostgreSQL's is ``page_text_sql``, with the same ``search``
contract; the ranking both share, and the work budget of one search, are ``page_rank``'s.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from imagesvc.catalog.page_rank import FIELD_BITS, FIELDS, SearchWork, rank
from imagesvc.catalog.text_fold import Word, index_text

__all__ = [
    "FIELDS",
    "build",
    "index_page",
    "index_pages",
    "rank",
    "search",
    "texts_held",
    "unindex_page",
    "unindex_pages",
]

PAGE_BITS = 20  # page numbers are at most 1,000,000 (< 2**20): the manifest schema's limit
BOOK_SHIFT = PAGE_BITS + FIELD_BITS


def _book_number(conn: sqlite3.Connection, book_id: str, *, create: bool) -> int | None:
    row = conn.execute("SELECT n FROM page_text_books WHERE book_id = ?", (book_id,)).fetchone()
    if row is not None or not create:
        return row[0] if row else None
    return conn.execute("INSERT INTO page_text_books (book_id) VALUES (?) RETURNING n", (book_id,)).fetchone()[0]


def _rows(n: int, number: int, page: dict[str, object]) -> list[tuple[int, str]]:
    base = (n << BOOK_SHIFT) | (number << FIELD_BITS)
    return [(base | i, index_text(str(page[f]))) for i, f in enumerate(FIELDS) if page.get(f) is not None]


def index_page(conn: sqlite3.Connection, book_id: str, number: int, page: dict[str, object]) -> None:
    """Index one page's texts (call ``unindex_page`` first when the page was indexed before)."""
    index_pages(conn, book_id, [(number, page)])


def index_pages(conn: sqlite3.Connection, book_id: str, pages: Sequence[tuple[int, dict[str, object]]]) -> None:
    """Index the texts of many pages of one book (call ``unindex_pages`` first for pages indexed before)."""
    n = _book_number(conn, book_id, create=True)
    assert n is not None
    rows = [row for number, page in pages for row in _rows(n, number, page)]
    conn.executemany("INSERT INTO pages_fts (rowid, text) VALUES (?, ?)", rows)


def unindex_page(conn: sqlite3.Connection, book_id: str, number: int) -> None:
    """Take the page's texts as the ``pages`` row holds them now out of the index (a contentless FTS5 table forgets
    a row only when told the values it indexed). No-op for a page not yet written."""
    unindex_pages(conn, book_id, [number])


def unindex_pages(conn: sqlite3.Connection, book_id: str, numbers: Sequence[int]) -> None:
    """``unindex_page`` for many pages of one book, their old texts read in a few queries (none for a book never
    indexed, as a new book is)."""
    n = _book_number(conn, book_id, create=False)
    if n is None:
        return
    numbers = list(numbers)
    for at in range(0, len(numbers), 500):
        chunk = numbers[at : at + 500]
        found = conn.execute(
            "SELECT number, ocr, translation, original FROM pages WHERE book_id = ?"
            f" AND number IN ({', '.join('?' * len(chunk))})",
            (book_id, *chunk),
        ).fetchall()
        rows = [row for number, *old in found for row in _rows(n, number, dict(zip(FIELDS, old, strict=True)))]
        conn.executemany("INSERT INTO pages_fts (pages_fts, rowid, text) VALUES ('delete', ?, ?)", rows)


def texts_held(catalog: Any, book_id: str) -> dict[int, set[str]]:
    """``{page number: the fields it holds a text in}`` for one book, from the index's row ids alone (a range of
    the index's row-id table; no page row is read)."""
    n = catalog.scalar("SELECT n FROM page_text_books WHERE book_id = ?", (book_id,))
    if n is None:
        return {}
    held: dict[int, set[str]] = {}
    page_mask, field_mask = (1 << PAGE_BITS) - 1, (1 << FIELD_BITS) - 1
    low, high = n << BOOK_SHIFT, ((n + 1) << BOOK_SHIFT) - 1
    for rowid in catalog.column("SELECT rowid FROM pages_fts WHERE rowid BETWEEN ? AND ?", (low, high)):
        held.setdefault((rowid >> FIELD_BITS) & page_mask, set()).add(FIELDS[rowid & field_mask])
    return held


def build(conn: sqlite3.Connection) -> int:
    """Index every page of a catalog that has none indexed (the migration's second half); returns pages indexed."""
    count = 0
    rows = conn.execute("SELECT book_id, number, ocr, translation, original FROM pages ORDER BY book_id, number")
    for book_id, number, *text in _batched(rows):
        index_page(conn, book_id, number, dict(zip(FIELDS, text, strict=True)))
        count += 1
    return count


def _batched(cursor: sqlite3.Cursor) -> Iterable[tuple[object, ...]]:
    while batch := cursor.fetchmany(500):
        yield from batch


def _read(conn: Any, book_id: str, keys: set[int]) -> dict[int, str]:
    """The texts book-local keys (``page << FIELD_BITS | field``) stand for, from ``pages``: one query for the pages
    named, reading only the fields named."""
    mask = (1 << FIELD_BITS) - 1
    numbers = sorted({key >> FIELD_BITS for key in keys})
    columns = sorted({key & mask for key in keys})
    found = conn.execute(
        f"SELECT number, {', '.join(FIELDS[i] for i in columns)} FROM pages WHERE book_id = ?"
        f" AND number IN ({', '.join('?' * len(numbers))})",
        (book_id, *numbers),
    ).fetchall()
    out: dict[int, str] = {}
    for number, *values in found:
        for i, value in zip(columns, values, strict=True):
            if (key := number << FIELD_BITS | i) in keys:
                out[key] = value or ""
    return out


def search(
    conn: sqlite3.Connection,
    book_id: str,
    words: Sequence[Word],
    fields: Sequence[str],
    *,
    limit: int,
    offset: int,
    work: SearchWork | None = None,
) -> tuple[list[tuple[int, float, tuple[str, ...]]], int]:
    """``([(page number, score, texts)], total)``: the book's pages on which every word stands in one of the ``fields``
    texts (a word's terms all in that one text), best first, and how many pages match in all (``page_rank.rank``,
    which counts its work in ``work``)."""
    n = _book_number(conn, book_id, create=False)
    if n is None or not words:
        return [], 0
    low, high = n << BOOK_SHIFT, ((n + 1) << BOOK_SHIFT) - 1
    wanted = {i for i, f in enumerate(FIELDS) if f in fields}
    local = (1 << BOOK_SHIFT) - 1

    def texts(term: str) -> set[int]:
        """Keys of this book's texts holding one term (terms are letters and digits only; quoted anyway)."""
        match = '"' + term.replace('"', '""') + '"'
        found = conn.execute(
            "SELECT rowid FROM pages_fts WHERE pages_fts MATCH ? AND rowid BETWEEN ? AND ?", (match, low, high)
        )
        return {rowid & local for (rowid,) in found if rowid & ((1 << FIELD_BITS) - 1) in wanted}

    return rank(words, texts, lambda keys: _read(conn, book_id, keys), limit=limit, offset=offset, work=work)
