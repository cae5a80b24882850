"""The PostgreSQL dialect of page search (``page_text`` keeps SQLite's FTS5 one): the ``page_texts`` table of
migration 7, its upkeep and its one query, with ``page_text``'s ``search`` contract and ranking.

Each text of a page is one row ``(book_id, number, field, terms)``, ``terms`` the distinct terms of the text folded by
``text_fold.index_terms`` (the same folding the SQLite index is fed, so both dialects find the same pages). A search
asks, for each term of the query, which of the book's texts hold it (``terms @> ARRAY[term]``: the GIN index on terms
for a term rare in the library, the primary key's book range for a common one); ``page_text.rank`` does the rest, as
on SQLite, reading texts from ``pages`` (in one query) only to check a phrase's order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from imagesvc.catalog.page_rank import FIELD_BITS, FIELDS, SearchWork, rank
from imagesvc.catalog.text_fold import Word, index_terms

__all__ = ["build", "index_page", "index_pages", "search", "unindex_page", "unindex_pages"]


def index_page(conn: Any, book_id: str, number: int, page: dict[str, object]) -> None:
    """Index one page's texts in place of any indexed before. Called after the ``pages`` row is written, so two
    ingesters writing one page at once take turns on that row's lock and the later one replaces the texts the
    earlier one committed (instead of a key conflict)."""
    index_pages(conn, book_id, [(number, page)])


def index_pages(conn: Any, book_id: str, pages: Sequence[tuple[int, dict[str, object]]]) -> None:
    """``index_page`` for many pages of one book, in two statements (the batch is sent in one round trip)."""
    unindex_pages(conn, book_id, [number for number, _ in pages])
    rows = [  # the terms go as one string the server splits: psycopg's array dumper checked each term with a regex
        (book_id, number, i, " ".join(index_terms(str(page[f]))))
        for number, page in pages
        for i, f in enumerate(FIELDS)
        if page.get(f) is not None
    ]
    if rows:
        conn.executemany(
            "INSERT INTO page_texts (book_id, number, field, terms) VALUES (?, ?, ?, string_to_array(?, ' '))", rows
        )


def unindex_page(conn: Any, book_id: str, number: int) -> None:
    """Take the page's texts out of the index (no-op for a page not indexed)."""
    unindex_pages(conn, book_id, [number])


def unindex_pages(conn: Any, book_id: str, numbers: Sequence[int]) -> None:
    """Take the texts of many pages of one book out of the index, in one statement."""
    if numbers:
        conn.execute("DELETE FROM page_texts WHERE book_id = ? AND number = ANY(?)", (book_id, list(numbers)))


def build(conn: Any) -> int:
    """Index every page of a catalog (the migration's second half, one book at a time); returns pages indexed."""
    count = 0
    books = [row[0] for row in conn.execute("SELECT DISTINCT book_id FROM pages ORDER BY book_id").fetchall()]
    for book_id in books:
        pages = conn.execute(
            "SELECT number, ocr, translation, original FROM pages WHERE book_id = ? ORDER BY number", (book_id,)
        ).fetchall()
        for number, *text in pages:
            index_page(conn, book_id, number, dict(zip(FIELDS, text, strict=True)))
            count += 1
    return count


def search(
    catalog: Any,
    book_id: str,
    words: Sequence[Word],
    fields: Sequence[str],
    *,
    limit: int,
    offset: int,
    work: SearchWork | None = None,
) -> tuple[list[tuple[int, float, tuple[str, ...]]], int]:
    """``([(page number, score, texts)], total)``: the book's pages on which every word stands in one of the ``fields``
    texts, best first, and how many pages match in all (``page_rank.rank``, which counts its work in ``work``)."""
    wanted = [i for i, f in enumerate(FIELDS) if f in fields]
    if not words or not wanted:
        return [], 0

    def texts(term: str) -> set[int]:
        rows = catalog.query_all(
            "SELECT number, field FROM page_texts WHERE book_id = ? AND terms @> ARRAY[?]::text[] AND field = ANY(?)",
            (book_id, term, wanted),
        )
        return {row["number"] << FIELD_BITS | row["field"] for row in rows}

    def read(keys: set[int]) -> dict[int, str]:
        """The texts ``keys`` stand for, in one query (by the primary key's book and page range), only the fields
        named (a text is ~2 KB, in TOAST: a field not asked for is never decompressed or sent)."""
        mask = (1 << FIELD_BITS) - 1
        numbers = sorted({key >> FIELD_BITS for key in keys})
        columns = [FIELDS[i] for i in sorted({key & mask for key in keys})]
        rows = catalog.query_all(
            f"SELECT number, {', '.join(columns)} FROM pages WHERE book_id = ? AND number = ANY(?)", (book_id, numbers)
        )
        by_number = {row["number"]: row for row in rows}
        return {key: (by_number.get(key >> FIELD_BITS) or {}).get(FIELDS[key & mask]) or "" for key in keys}

    return rank(words, texts, read, limit=limit, offset=offset, work=work)
