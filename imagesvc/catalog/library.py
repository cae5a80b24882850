"""The catalogue browser's query: live books filtered by author, years, language, category, collection, library,
work, edition key, translation and edition language, optionally ranked by full text over titles and authors (FTS5
in SQLite, a GIN-indexed tsvector in PostgreSQL: the two dialect branches are here and nowhere else).

Every filter is a bound parameter; free text is turned into quoted FTS5 terms, so no caller input is SQL or FTS
syntax. Counts and rows come from one filtered set, so ``total`` always matches what paging returns.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "PG_SORTS",
    "SORTS",
    "BookFilters",
    "author_name",
    "canonical_slug",
    "facet_counts",
    "query_books",
    "title_author_expression",
    "tsquery",
]

_WORD = re.compile(r"\w+", re.UNICODE)
_PROGRESS = (
    "(SELECT count(*) FROM pages p WHERE p.book_id = b.id) AS page_count,"
    " (SELECT count(*) FROM pages p WHERE p.book_id = b.id AND p.translation IS NOT NULL) AS translated_pages"
)
_HAS_TRANSLATION = "EXISTS (SELECT 1 FROM pages p WHERE p.book_id = b.id AND p.translation IS NOT NULL)"
_HAS_IMAGES = "EXISTS (SELECT 1 FROM illustrations i WHERE i.book_id = b.id AND i.removed = 0)"
_TITLE = "b.title COLLATE NOCASE, b.id"
# Whole ORDER BY clauses, ties broken by title then id; the first three match an index of migration 4 exactly.
# NULLs sort first in SQLite, so a DESC order puts books without a date last by itself.
SORTS: dict[str, str] = {
    "recent-translation": f"b.translated_at DESC, {_TITLE}",
    "recent": f"b.ingested_at DESC, {_TITLE}",
    "title-asc": _TITLE,
    "title-desc": "b.title COLLATE NOCASE DESC, b.id DESC",
    "date_asc": f"b.year IS NULL, b.year, {_TITLE}",
    "date_desc": f"b.year DESC, {_TITLE}",
}
# The same orders in PostgreSQL, whatever the database's locale: SQLite's NOCASE folds the ASCII letters only and
# then compares code points, so PostgreSQL folds A-Z alone (lower() would fold all of Unicode) and compares in the "C"
# collation (a locale such as en_US would skip punctuation and file É with E). Migration 9 indexes this expression.
# NULLs sort last on DESC as in SQLite.
_PG_TITLE_KEY = "translate(b.title, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz') COLLATE \"C\""
_PG_TITLE = f"{_PG_TITLE_KEY}, b.id"
PG_SORTS: dict[str, str] = {
    "recent-translation": f"b.translated_at DESC NULLS LAST, {_PG_TITLE}",
    "recent": f"b.ingested_at DESC NULLS LAST, {_PG_TITLE}",
    "title-asc": _PG_TITLE,
    "title-desc": f"{_PG_TITLE_KEY} DESC, b.id DESC",
    "date_asc": f"b.year ASC NULLS LAST, {_PG_TITLE}",
    "date_desc": f"b.year DESC NULLS LAST, {_PG_TITLE}",
}


def canonical_slug(value: str) -> str:
    """An author or library name in slug form: ``Claude Ferrandier`` -> ``claude-ferrandier``."""
    return "-".join(w.casefold() for w in _WORD.findall(value) if w != "_")


def author_name(catalog: Any, author_id: str) -> str | None:
    """The name a live book gives for canonical author ``author_id``, or None when no live book has that author."""
    row = catalog.query_one(
        "SELECT author FROM books WHERE author_id = ? AND withdrawn = 0 ORDER BY id LIMIT 1", (author_id,)
    )
    return row["author"] if row else None


def tsquery(catalog: Any, text: str, *, phrase: bool = False) -> str:
    """The PostgreSQL twin of the FTS5 expressions here: every word folded as the index folds it, then quoted (no user
    input is tsquery syntax, ``search_sql.folded_words``), any word may match (``phrase``: all, in order), the last
    also as a prefix. An empty text gives a query that matches nothing."""
    from imagesvc.catalog.search_sql import folded_words, quoted

    terms = quoted(folded_words(catalog, text)[:32])
    if not terms:
        return "''"
    terms[-1] += ":*"
    return (" <-> " if phrase else " | ").join(terms)


def title_author_expression(text: str) -> str | None:
    """Quoted FTS5 terms, any of which may match (BM25 puts books matching more of them first); the last word
    also matches as a prefix. None when the text holds no word."""
    words = [w.casefold() for w in _WORD.findall(text)][:32]
    if not words:
        return None
    terms = [f'"{w}"' for w in words]
    terms[-1] += "*"
    return " OR ".join(terms)


@dataclass(frozen=True)
class BookFilters:
    """What /books/library filters on; None leaves a filter out."""

    author_id: str | None = None
    year_from: int | None = None
    year_to: int | None = None
    language: str | None = None
    category: str | None = None
    collection: str | None = None
    library: str | None = None
    search: str | None = None
    has_translation: bool | None = None
    first_translation: bool | None = None
    has_edition: str | None = None
    work_id: str | None = None
    edition_key: str | None = None
    has_images: bool | None = None  # true: books with at least one illustration; false: books with none


def _where(catalog: Any, f: BookFilters) -> tuple[list[str], list[Any]]:
    where, args = ["b.withdrawn = 0"], []
    equal = {
        "b.author_id": f.author_id,
        "b.collection": f.collection,
        "b.work_id": f.work_id,
        "b.edition_key": f.edition_key,
    }
    for column, value in equal.items():
        if value is not None:
            where.append(f"{column} = ?")
            args.append(value)
    for column, value in (("b.language", f.language), ("b.category", f.category)):
        if value is not None:
            where.append(f"lower({column}) = lower(?)")
            args.append(value)
    if f.library is not None:  # the contributing institution, by its name or the name's slug
        names = [r["institution"] for r in catalog.query_all("SELECT DISTINCT institution FROM books")]
        wanted = canonical_slug(f.library)
        matches = [n for n in names if n.casefold() == f.library.casefold() or canonical_slug(n) == wanted]
        where.append(f"b.institution IN ({','.join('?' * len(matches))})" if matches else "1 = 0")
        args += matches
    if f.year_from is not None:  # a book without a year never matches a year filter
        where.append("b.year IS NOT NULL AND b.year >= ?")
        args.append(f.year_from)
    if f.year_to is not None:
        where.append("b.year IS NOT NULL AND b.year <= ?")
        args.append(f.year_to)
    if f.has_translation is not None:
        where.append(_HAS_TRANSLATION if f.has_translation else f"NOT {_HAS_TRANSLATION}")
    if f.has_images is not None:
        where.append(_HAS_IMAGES if f.has_images else f"NOT {_HAS_IMAGES}")
    if f.first_translation is not None:
        where.append("b.first_translation = ?")
        args.append(int(f.first_translation))
    if f.has_edition is not None:
        each = (
            "json_array_elements_text(CAST(b.edition_languages AS json)) AS e(value)"
            if catalog.dialect == "postgres"
            else "json_each(b.edition_languages) AS e"
        )
        where.append(f"EXISTS (SELECT 1 FROM {each} WHERE lower(e.value) = lower(?))")
        args.append(f.has_edition)
    return where, args


# What the catalogue page counts, each as the books matching every other filter would be split by it: facet name ->
# (the SQL of a book's value, the filter it stands for). Centuries are of the edition year.
FACETS: dict[str, tuple[str, str]] = {
    "language": ("b.language", "language"),
    "library": ("b.institution", "library"),
    "collection": ("b.collection", "collection"),
    "century": ("CAST(b.year / 100 AS INTEGER) * 100", "year_from"),
    "has_images": (f"CASE WHEN {_HAS_IMAGES} THEN 1 ELSE 0 END", "has_images"),
}


def facet_counts(catalog: Any, f: BookFilters) -> dict[str, list[tuple[Any, int]]]:
    """For each of ``FACETS``, its values among the live books matching ``f`` without that facet's own filter, with how
    many books each has, most first (a facet's counts show what choosing another of its values would give)."""
    if f.search is not None and title_author_expression(f.search) is None:
        return {name: [] for name in FACETS}  # a search without a word matches no book (as query_books answers)
    out: dict[str, list[tuple[Any, int]]] = {}
    for name, (value, field_name) in FACETS.items():
        unset = {field_name: None} | ({"year_to": None} if name == "century" else {})
        where, args = _where(catalog, dataclasses.replace(f, **unset))
        join = ""
        if f.search is not None:
            where, args, join = _search_where(catalog, f.search, where, args)
        rows = catalog.query_all(
            f"SELECT {value} AS v, count(*) AS n FROM books b {join} WHERE {' AND '.join(where)}"
            f" AND {value} IS NOT NULL GROUP BY {value} ORDER BY n DESC, v",
            args,
        )
        out[name] = [(r["v"], r["n"]) for r in rows]
    return out


def _search_where(catalog: Any, text: str, where: list[str], args: list[Any]) -> tuple[list[str], list[Any], str]:
    """``where`` narrowed to books whose title or author matches ``text`` (the join it needs)."""
    if catalog.dialect == "postgres":
        return (
            [*where, "s.doc @@ to_tsquery('simple', ?)"],
            [*args, tsquery(catalog, text)],
            ("JOIN book_search s ON s.book_id = b.id"),
        )
    return (
        [*where, "books_fts MATCH ?"],
        [*args, title_author_expression(text) or '""'],
        ("JOIN books_fts ON books_fts.rowid = b.rowid"),
    )


def query_books(
    catalog: Any, f: BookFilters, *, sort: str | None, limit: int, offset: int, after: str | None = None
) -> tuple[list[dict[str, Any]], int]:
    """One page of live books matching ``f`` and the total that match. ``sort`` is a key of ``SORTS``; None means
    relevance when ``f.search`` is given, else ``recent-translation``. Ties fall back to title, then id.

    ``after`` (a book id, with ``sort="title-asc"`` only): the page begins after that book in title order (keyset
    paging: any depth at the cost of one page; a book withdrawn since still marks its place)."""
    where, args = _where(catalog, f)
    postgres = catalog.dialect == "postgres"
    join, rank, rank_args = "", None, []
    if f.search is not None:
        expression = title_author_expression(f.search)
        if expression is None:
            return [], 0
        if postgres:  # the stored vectors of book_search (migration 13); ts_rank is higher for better, so negated
            query, terms = "to_tsquery('simple', ?)", tsquery(catalog, f.search)
            join = "JOIN book_search s ON s.book_id = b.id"
            where.append(f"s.doc @@ {query}")
            args.append(terms)
            rank, rank_args = f"-ts_rank(s.doc, {query})", [terms]
        else:
            join = "JOIN books_fts ON books_fts.rowid = b.rowid"
            where.append("books_fts MATCH ?")
            args.append(expression)
            rank = "bm25(books_fts, 1.0, 1.0)"
    total = catalog.query_one(f"SELECT count(*) AS n FROM books b {join} WHERE {' AND '.join(where)}", args)["n"]
    if after is not None:
        if sort != "title-asc":
            raise ValueError("keyset paging (after) follows sort=title-asc only")
        key = _PG_TITLE_KEY if postgres else "b.title COLLATE NOCASE"
        where.append(f"({key}, b.id) > (SELECT {key.replace('b.', 'a.')}, a.id FROM books a WHERE a.id = ?)")
        args.append(after)
    clause = " AND ".join(where)
    sorts, title = (PG_SORTS, _PG_TITLE) if postgres else (SORTS, _TITLE)
    order = f"{rank}, {title}" if sort is None and rank is not None else sorts[sort or "recent-translation"]
    if not (sort is None and rank is not None):
        rank_args = []
    # Order and cut on the bare rows first; page counts are then taken for this page's books only.
    ids = [
        r["id"]
        for r in catalog.query_all(
            f"SELECT b.id FROM books b {join} WHERE {clause} ORDER BY {order} LIMIT ? OFFSET ?",
            [*args, *rank_args, limit, offset],
        )
    ]
    if not ids:
        return [], total
    marks = ",".join("?" * len(ids))
    found = {
        r["id"]: r for r in catalog.query_all(f"SELECT b.*, {_PROGRESS} FROM books b WHERE b.id IN ({marks})", ids)
    }
    rows = [found[i] for i in ids]
    return rows, total
