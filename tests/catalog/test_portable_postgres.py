"""PostgreSQL catalogs that differ from the test cluster's defaults: a database in a natural-language locale orders
books as SQLite does, and a session with an empty search_path (what a dump's restore script sets) can still write
books and rebuild the search indexes (the change feed's order under overlapping writers: test_change_feed.py)."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest

from imagesvc.catalog import Catalog
from imagesvc.catalog import writes as w
from imagesvc.catalog.library import BookFilters, query_books
from tests.catalog.test_catalog import book
from tests.servers import create_database

TITLES = [
    "Éclair des mines",
    "Eagle stone",
    "e-book of salts",
    "ebony",
    "Zeta",
    "apple",
    "_under",
    "Ärztebuch",
    "10 Keys",
]


def _postgres(server: Any, *options: str) -> Any:
    from imagesvc.catalog.postgres import PostgresCatalog

    return PostgresCatalog(create_database(server, f"t_{secrets.token_hex(6)}", *options), pool_size=4, pool_timeout=2)


def _titles(catalog: Any, sort: str) -> list[str]:
    for n, title in enumerate(TITLES):
        with catalog.transaction() as conn:
            w.upsert_book(conn, book(n, title=title), "h")
    return [r["title"] for r in query_books(catalog, BookFilters(), sort=sort, limit=50, offset=0)[0]]


@pytest.mark.parametrize("sort", ["title-asc", "title-desc"])
def test_a_database_in_an_english_locale_orders_titles_as_sqlite_does(
    postgres_server: Any, tmp_path: Path, sort: str
) -> None:
    sqlite = Catalog(tmp_path / "catalog.sqlite3")
    english = _postgres(postgres_server, "--template=template0", "--locale-provider=icu", "--icu-locale=en-US")
    try:
        expected = _titles(sqlite, sort)
        assert _titles(english, sort) == expected
    finally:
        sqlite.close()
        english.close()


def test_a_session_with_an_empty_search_path_writes_and_reindexes(postgres_server: Any) -> None:
    catalog = _postgres(postgres_server)
    try:
        with catalog.transaction() as conn:
            conn.execute("SET LOCAL search_path = ''")
            conn.execute(
                "INSERT INTO public.books (id, slug, title, author, language, year, institution, item_url,"
                " source_hash, ingested_at) VALUES ('00ff', 'restored', 'Éclair', 'A', 'la', 1500, 'I', 'u', 'h',"
                " '2026-01-01')"
            )
            conn.execute("REINDEX INDEX public.illustrations_search_doc")
            conn.execute("REINDEX INDEX public.book_search_doc")
        rows, total = query_books(catalog, BookFilters(search="eclair"), sort=None, limit=5, offset=0)
        assert total == 1 and rows[0]["slug"] == "restored"
    finally:
        catalog.close()


@pytest.mark.parametrize(("sort", "index"), [("title-asc", "books_by_title"), ("recent", "books_recent")])
def test_the_title_orders_read_their_indexes(postgres_server: Any, sort: str, index: str) -> None:
    """Migration 9 indexes the very expressions the title orders use, so a page of the catalogue browser at 15,000
    books is read from an index, not sorted."""
    from imagesvc.catalog.library import PG_SORTS

    catalog = _postgres(postgres_server)
    try:
        with catalog.transaction() as conn:
            conn.execute("SET LOCAL enable_seqscan = off")
            conn.execute("SET LOCAL enable_sort = off")
            plan = "\n".join(r[0] for r in conn.execute(f"EXPLAIN SELECT b.id FROM books b ORDER BY {PG_SORTS[sort]}"))
        assert index in plan, plan
    finally:
        catalog.close()
