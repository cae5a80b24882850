"""The SQLite full-text index of page text (OCR, translation, original): its table, its upkeep, its one query.

An FTS5 table without content of its own (the text lives in ``pages``), fed text folded by ``text_fold.fold`` so that
Hebrew, Arabic, Latin with accents or long s, and Chinese written without spaces all meet their queries. Each page's
row id is ``book number << 20 | page number``, with the book's number kept in ``page_text_books``: the pages of one
book are one contiguous row-id range, so a search inside a book reads only that range of each term's list, however
common the term is in the rest of the library.

This module is the SQLite dialect of page search; a PostgreSQL backend puts its own beside it with the same
``search`` contract.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence

from imagesvc.catalog.text_fold import Word, fold

__all__ = ["FIELDS", "MIGRATION", "build", "index_page", "search", "unindex_page"]

FIELDS = ("ocr", "translation", "original")
PAGE_BITS = 20  # page numbers are at most 1,000,000 (< 2**20): the manifest schema's limit

MIGRATION = """
CREATE TABLE IF NOT EXISTS page_text_books (
    n INTEGER PRIMARY KEY,  -- stable across VACUUM, unlike an implicit rowid
    book_id TEXT NOT NULL UNIQUE
);
CREATE VIRTUAL TABLE IF NOT EXISTS pages_fts USING fts5(
    ocr, translation, original, content='', tokenize='unicode61 remove_diacritics 2'
);
"""


def _book_number(conn: sqlite3.Connection, book_id: str, *, create: bool) -> int | None:
    row = conn.execute("SELECT n FROM page_text_books WHERE book_id = ?", (book_id,)).fetchone()
    if row is not None or not create:
        return row[0] if row else None
    return conn.execute("INSERT INTO page_text_books (book_id) VALUES (?) RETURNING n", (book_id,)).fetchone()[0]


def _values(page: dict[str, object] | sqlite3.Row) -> list[str]:
    return [fold(str(page[f])) if page[f] is not None else "" for f in FIELDS]


def index_page(conn: sqlite3.Connection, book_id: str, number: int, page: dict[str, object]) -> None:
    """Index one page's text (call ``unindex_page`` first when the page was indexed before)."""
    n = _book_number(conn, book_id, create=True)
    assert n is not None
    conn.execute(
        "INSERT INTO pages_fts (rowid, ocr, translation, original) VALUES (?, ?, ?, ?)",
        ((n << PAGE_BITS) | number, *_values(page)),
    )


def unindex_page(conn: sqlite3.Connection, book_id: str, number: int) -> None:
    """Take the page's text as the ``pages`` row holds it now out of the index (a contentless FTS5 table forgets a
    row only when told the values it indexed). No-op for a page not yet written."""
    old = conn.execute(
        "SELECT ocr, translation, original FROM pages WHERE book_id = ? AND number = ?", (book_id, number)
    ).fetchone()
    n = _book_number(conn, book_id, create=False)
    if old is None or n is None:
        return
    conn.execute(
        "INSERT INTO pages_fts (pages_fts, rowid, ocr, translation, original) VALUES ('delete', ?, ?, ?, ?)",
        ((n << PAGE_BITS) | number, *_values(dict(zip(FIELDS, old, strict=True)))),
    )


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


def _expression(words: Sequence[Word]) -> str:
    """The FTS5 query for ``words``: each a quoted token or phrase, all required. Tokens hold only letters and
    digits (``text_fold``), and quotes are doubled anyway, so nothing a caller types is read as an operator."""
    quoted = ['"' + " ".join(word.tokens).replace('"', '""') + '"' for word in words]
    return " AND ".join(quoted)


def search(
    conn: sqlite3.Connection,
    book_id: str,
    words: Sequence[Word],
    fields: Sequence[str],
    *,
    limit: int,
    offset: int,
) -> tuple[list[tuple[int, float]], int]:
    """``([(page number, score)], total)``: the book's pages whose ``fields`` hold every word, best first (score is
    bm25, higher is better here), and how many pages match in all."""
    n = _book_number(conn, book_id, create=False)
    if n is None or not words:
        return [], 0
    columns = "{" + " ".join(f for f in FIELDS if f in fields) + "}"
    match = f"{columns} : ({_expression(words)})"
    low, high = n << PAGE_BITS, ((n + 1) << PAGE_BITS) - 1
    where = "pages_fts MATCH ? AND rowid BETWEEN ? AND ?"
    total = conn.execute(f"SELECT count(*) FROM pages_fts WHERE {where}", (match, low, high)).fetchone()[0]
    rows = conn.execute(
        f"SELECT rowid, bm25(pages_fts) AS score FROM pages_fts WHERE {where} ORDER BY score, rowid LIMIT ? OFFSET ?",
        (match, low, high, limit, offset),
    ).fetchall()
    mask = (1 << PAGE_BITS) - 1
    return [(rowid & mask, -score) for rowid, score in rows], total
