"""Catalog reads of the bulk surface: the pages an archive holds, the keyset-paged dataset listing, the change log.

Plain SQL over the tables of migrations 1 and 6, through the catalog's ``query_all``/``query_one``, so another
catalog backend can offer the same functions. Every read is an indexed range: (book_id, number) for pages,
(owner, tier) for renditions, seq for changes.
"""

from __future__ import annotations

from typing import Any

from imagesvc.catalog import fold

__all__ = ["archive_pages", "book_versions", "change_count", "changes", "dataset_pages", "dataset_total"]


def archive_pages(catalog: Any, book_id: str, first: int, last: int, tier: str) -> list[dict[str, Any]]:
    """The pages ``first..last`` of a book: ``number``, ``image_unavailable``, ``unavailable_reason`` and whether the
    tier is stored (``stored``), in page order; a few small columns, not the pages' text."""
    return catalog.query_all(
        "SELECT p.number, p.image_unavailable, p.unavailable_reason, r.owner IS NOT NULL AS stored"
        " FROM pages p LEFT JOIN renditions r ON r.owner = p.id AND r.tier = ?"
        " WHERE p.book_id = ? AND p.number BETWEEN ? AND ? ORDER BY p.number",
        (tier, book_id, first, last),
    )


def book_versions(catalog: Any, book_ids: list[str]) -> dict[str, dict[str, Any]]:
    """``{book_id: {seq, at}}``: each book's latest change (its catalog version) from the change log."""
    sql = "SELECT book_id, max(seq) AS seq, max(at) AS at FROM book_changes WHERE book_id IN ({marks}) GROUP BY book_id"
    return {row["book_id"]: {"seq": row["seq"], "at": row["at"]} for row in catalog.query_in(sql, book_ids)}


def dataset_pages(catalog: Any, after: tuple[str, int] | None, limit: int, book: str | None) -> list[dict[str, Any]]:
    """Up to ``limit`` pages of live books after the keyset position ``(book_id, number)``, ordered by book id and
    page number, optionally of one book (id or slug); each row joined with its book's slug and title."""
    where = ["b.withdrawn = 0"]
    args: list[Any] = []
    if book is not None:
        where.append("(b.id = ? OR b.slug = ?)")
        args += [fold(book)] * 2
    if after is not None:
        # A row value, not "book_id > ? OR (book_id = ? AND number > ?)": SQLite answers the OR by walking the index
        # from its start to the cursor, so each page of a harvest cost more than the one before.
        where.append("(p.book_id, p.number) > (?, ?)")
        args += [after[0], after[1]]
    return catalog.query_all(
        "SELECT p.id AS page_id, p.book_id, b.slug, b.title, p.number, p.image_unavailable, p.unavailable_reason,"
        " p.master_sha256, p.master_bytes, p.master_format, p.width, p.height"
        f" FROM pages p JOIN books b ON b.id = p.book_id WHERE {' AND '.join(where)}"
        " ORDER BY p.book_id, p.number LIMIT ?",
        (*args, limit),
    )


def dataset_total(catalog: Any, book: str | None) -> int:
    """How many pages the listing holds (of one book, or of every live book)."""
    if book is None:
        row = catalog.query_one(
            "SELECT count(*) AS n FROM pages p JOIN books b ON b.id = p.book_id WHERE b.withdrawn = 0"
        )
    else:
        row = catalog.query_one(
            "SELECT count(*) AS n FROM pages p JOIN books b ON b.id = p.book_id"
            " WHERE b.withdrawn = 0 AND (b.id = ? OR b.slug = ?)",
            (fold(book),) * 2,
        )
    return int(row["n"]) if row else 0


def change_count(catalog: Any) -> int:
    """How many changes are logged. Not the highest ``seq``: PostgreSQL spends an identity value on an insert that
    is rolled back (an ingest killed mid-book), so sequence numbers can have holes."""
    row = catalog.query_one("SELECT count(*) AS n FROM book_changes")
    return int(row["n"]) if row else 0


def changes(catalog: Any, first: int, last: int) -> list[dict[str, Any]]:
    """The logged changes at positions ``first..last`` (1-based, oldest first, by ``seq``, holes skipped): ``seq,
    book_id, slug, kind, at``. The log holds a few changes per book, so the offset stays cheap."""
    return catalog.query_all(
        "SELECT seq, book_id, slug, kind, at FROM book_changes ORDER BY seq LIMIT ? OFFSET ?",
        (max(0, last - first + 1), max(0, first - 1)),
    )
