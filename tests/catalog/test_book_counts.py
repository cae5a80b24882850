"""The counts ``/health`` shows come from ``book_counts`` (migration 11, kept by triggers), on both backends: after
every kind of catalog write (a book ingested, rewritten, a page's image withdrawn and restored, illustrations
replaced or removed, pages dropped, a book withdrawn, restored and deleted, an ingester killed mid-book, two racing)
they equal a direct count of the rows, and a catalog migrated from version 10 gets its existing books counted."""

from __future__ import annotations

import os
import secrets
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from imagesvc.catalog import Catalog
from imagesvc.catalog import writes as w
from imagesvc.catalog.schema import MIGRATIONS, SCHEMA_VERSION
from tests.catalog.conftest import Backend
from tests.catalog.test_bulk_writes import TEXTS, _book, _rows
from tests.servers import create_database, migrate_postgres_to

PER_BOOK = (
    "SELECT b.id, (SELECT count(*) FROM pages p WHERE p.book_id = b.id),"
    " (SELECT count(*) FROM pages p WHERE p.book_id = b.id AND p.image_unavailable = 1),"
    " (SELECT count(*) FROM illustrations i WHERE i.book_id = b.id AND i.removed = 0) FROM books b ORDER BY b.id"
)


def _exact(catalog: Catalog) -> dict[str, int]:
    """The kept counts, after checking them against the rows: the library's and each book's."""
    kept = catalog.counts()
    assert kept == catalog.counted()
    rows = catalog.tuples("SELECT book_id, pages, pages_without_image, illustrations FROM book_counts ORDER BY book_id")
    assert [tuple(r) for r in rows] == [tuple(r) for r in catalog.tuples(PER_BOOK)]
    return kept


def _numbers(counts: dict[str, int]) -> tuple[int, int, int, int]:
    return counts["books"], counts["pages"], counts["pages_without_image"], counts["illustrations"]


def _ingest(catalog: Catalog, book_id: str, drawn: dict[int, str], *, dark: tuple[int, ...] = ()) -> None:
    rows = _rows(book_id, TEXTS, drawn)
    for page, _, _ in rows:
        page["image_unavailable"] = int(page["number"] in dark)
    with catalog.transaction() as conn:
        w.upsert_book(conn, _book(book_id), "h")
        w.upsert_pages(conn, rows)


def test_counts_stay_exact_through_every_write(catalog: Catalog) -> None:
    assert _numbers(_exact(catalog)) == (0, 0, 0, 0)
    _ingest(catalog, "alpha", {1: "a sun", 3: "a dragon"}, dark=(2,))
    _ingest(catalog, "beta", {2: "a moon"})
    assert _numbers(_exact(catalog)) == (2, 6, 1, 3)
    _ingest(catalog, "alpha", {1: "a lion"}, dark=(2, 3))  # rewritten: one illustration less, one more dark page
    assert _numbers(_exact(catalog)) == (2, 6, 2, 2)
    _ingest(catalog, "alpha", {1: "a lion"})  # the pages' images restored
    assert _numbers(_exact(catalog)) == (2, 6, 0, 2)
    with catalog.transaction() as conn:  # one page's image withdrawn by a direct write (an operator's SQL)
        conn.execute("UPDATE pages SET image_unavailable = 1 WHERE id = ?", ("beta-3",))
    assert _numbers(_exact(catalog)) == (2, 6, 1, 2)
    with catalog.transaction() as conn:  # illustrations replaced page by page, as older ingest wrote them
        page, renditions, _ = _rows("beta", TEXTS, {})[1]
        ills = [{"id": f"beta-2-i{n}", "index": n, "bbox": {"x": 0, "y": 0, "width": 1, "height": 1},
                 "type": "emblem", "description": "a tree"} for n in range(3)]  # fmt: skip
        w.upsert_page(conn, page, renditions, ills)
    assert _numbers(_exact(catalog)) == (2, 6, 1, 4)
    with catalog.transaction() as conn:
        assert w.remove_illustration(conn, "beta-2-i1")
        assert w.remove_illustration(conn, "beta-2-i1")  # removed twice: counted once
    assert _numbers(_exact(catalog)) == (2, 6, 1, 3)
    with catalog.transaction() as conn:  # removed again by hand, then restored
        conn.execute("UPDATE illustrations SET removed = 0 WHERE id = ?", ("beta-2-i1",))
    assert _numbers(_exact(catalog)) == (2, 6, 1, 4)
    with catalog.transaction() as conn:  # the manifest drops pages 2 and 3 of beta (one dark, three illustrations)
        w.delete_pages_not_in(conn, "beta", [1])
    assert _numbers(_exact(catalog)) == (2, 4, 0, 1)
    with catalog.transaction() as conn:
        assert w.withdraw_book(conn, "alpha")
    assert _numbers(_exact(catalog)) == (1, 1, 0, 0)
    with catalog.transaction() as conn:  # a withdrawn book ingested again is live again, with its counts
        w.upsert_book(conn, _book("alpha"), "h2")
    assert _numbers(_exact(catalog)) == (2, 4, 0, 1)
    with catalog.transaction() as conn:  # a book deleted: its pages and illustrations go with it (foreign keys)
        conn.execute("DELETE FROM books WHERE id = ?", ("alpha",))
    assert _numbers(_exact(catalog)) == (1, 1, 0, 0)
    assert catalog.scalar("SELECT count(*) FROM book_counts") == 1  # the deleted book's row went too
    _ingest(catalog, "alpha", {2: "a star"})  # and it can come back
    assert _numbers(_exact(catalog)) == (2, 4, 0, 1)


def test_a_rolled_back_write_leaves_the_counts_as_they_were(catalog: Catalog) -> None:
    _ingest(catalog, "kept", {1: "a sun"})
    before = _exact(catalog)
    try:
        with catalog.transaction() as conn:
            w.upsert_book(conn, _book("half"), "h")
            w.upsert_pages(conn, _rows("half", TEXTS, {1: "a sun"}))
            w.delete_pages_not_in(conn, "kept", [])
            raise RuntimeError("the ingester failed mid-book")
    except RuntimeError:
        pass
    assert _exact(catalog) == before


_KILLED = """
import sys, time
from imagesvc.catalog import Catalog
from imagesvc.catalog import writes as w
from imagesvc.catalog.postgres import PostgresCatalog
from tests.catalog.test_bulk_writes import TEXTS, _book, _rows
catalog = Catalog(sys.argv[2]) if sys.argv[1] == "sqlite" else PostgresCatalog(sys.argv[2])
with catalog.transaction() as conn:
    w.upsert_book(conn, _book("killed"), "h")
    w.upsert_pages(conn, _rows("killed", TEXTS, {1: "a sun", 2: "a moon"}))
    w.delete_pages_not_in(conn, "kept", [1])
    print("written", flush=True)
    time.sleep(60)
"""


def test_an_ingester_killed_mid_book_leaves_the_counts_exact(backend: Backend, tmp_path: Path) -> None:
    catalog = backend.open()
    _ingest(catalog, "kept", {1: "a sun", 3: "a dragon"}, dark=(2,))
    before = _exact(catalog)
    where = backend.settings.get("IMAGESVC_DATABASE_URL") or str(tmp_path / "catalog.sqlite3")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-c", _KILLED, backend.dialect, where], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "written", proc.stderr
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    deadline = time.monotonic() + 10  # PostgreSQL rolls back once it sees the connection gone
    while catalog.counts() != before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _exact(catalog) == before
    _ingest(catalog, "killed", {1: "a sun", 2: "a moon"})  # the rerun lands the book, counted once
    assert _numbers(_exact(catalog)) == (2, 6, 1, 4)


def test_two_ingesters_racing_keep_the_counts_exact(backend: Backend) -> None:
    """Two ingesters (connections of their own) write the same books and books of their own at once, a book's
    pages and illustrations rewritten over and over with different counts: whatever order the commits land in,
    the kept counts are the rows' counts."""
    first, second = backend.open(), backend.open()
    errors: list[BaseException] = []

    def ingester(catalog: Catalog, own: str, turn: int) -> None:
        try:
            for n in range(12):
                drawn = {1: "a sun", 2: "a moon"} if (n + turn) % 2 else {3: "a lion"}
                dark = (1, 2) if n % 3 == turn else ()
                _ingest(catalog, "shared", drawn, dark=dark)
                _ingest(catalog, f"{own}{n % 3}", drawn, dark=dark)
                if n % 4 == 3:
                    with catalog.transaction() as conn:
                        w.delete_pages_not_in(conn, "shared", [1])
        except BaseException as exc:  # reported below, from the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=ingester, args=(c, o, t)) for c, o, t in ((first, "a", 0), (second, "b", 1))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors  # writers take turns (an immediate transaction; catalog_state's row lock)
    counts = _exact(first)
    assert counts["books"] == 7 and counts == _exact(second)


def _version_10_sqlite(path: Path) -> None:
    """A catalog at schema 10 (what main's imagesvc wrote before book_counts) with books in it."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    for number, script in enumerate(MIGRATIONS[:10], 1):
        conn.executescript(f"BEGIN; {script}; PRAGMA user_version = {number}; COMMIT;")
    _fill_version_10(conn)
    conn.close()


class _OldSchema:
    """A connection to an old schema for today's writer: a batch with no rows is not sent (SQLite would still compile
    its statement, naming columns the old tables lack)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def executemany(self, sql: str, rows: Any) -> Any:
        rows = list(rows)
        return self.conn.executemany(sql, rows) if rows else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


def _fill_version_10(conn: Any) -> None:
    conn = _OldSchema(conn)
    conn.execute("BEGIN")
    for book_id, drawn, dark in (("old1", {1: "a sun", 3: "a dragon"}, (2,)), ("old2", {2: "a moon"}, (1, 3))):
        w.upsert_book(conn, _book(book_id), "h")
        # No renditions: today's writer fills columns a schema-10 table lacks (clean sizes, migration 14); the
        # counts read pages and illustrations only.
        rows = [(page, {}, illustrations) for page, _, illustrations in _rows(book_id, TEXTS, drawn)]
        for page, _, _ in rows:
            page["image_unavailable"] = int(page["number"] in dark)
        w.upsert_pages(conn, rows)
    w.upsert_book(conn, _book("empty"), "h")  # a book with no page yet
    w.withdraw_book(conn, "old2")
    conn.execute("UPDATE illustrations SET removed = 1 WHERE id = 'old1-3-i0'")
    conn.execute("COMMIT")


def test_an_existing_sqlite_catalog_gets_its_books_counted_by_the_migration(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    _version_10_sqlite(path)
    opened = [Catalog(path) for _ in range(2)]  # a second node opening it after the first migrated
    try:
        assert opened[0].schema_version == SCHEMA_VERSION
        assert _numbers(_exact(opened[0])) == (2, 3, 1, 1)
        assert opened[1].counts() == opened[0].counts()
    finally:
        for catalog in opened:
            catalog.close()


def test_an_existing_postgres_catalog_counted_by_two_nodes_migrating_at_once(postgres_server: Any) -> None:
    """Two nodes open a populated schema-10 database at the same instant: one migrates (advisory lock) and
    counts the existing books once, the other waits and finds it current."""
    import psycopg

    from imagesvc.catalog.postgres import PostgresCatalog, _Conn

    url = create_database(postgres_server, f"t_{secrets.token_hex(6)}")
    with psycopg.connect(url, autocommit=True) as conn:
        migrate_postgres_to(conn, 10)
        _fill_version_10(_Conn(conn))
    opened: list[PostgresCatalog] = []
    start = time.monotonic() + 0.5

    def node() -> None:
        while time.monotonic() < start:
            pass
        opened.append(PostgresCatalog(url, pool_size=2))

    threads = [threading.Thread(target=node) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    try:
        assert len(opened) == 2 and all(c.schema_version == SCHEMA_VERSION for c in opened)
        versions = opened[0].column("SELECT version FROM schema_version ORDER BY version")
        assert versions == list(range(1, SCHEMA_VERSION + 1))  # each migration applied once
        assert _numbers(_exact(opened[0])) == (2, 3, 1, 1)
        assert opened[1].counts() == opened[0].counts()
    finally:
        for catalog in opened:
            catalog.close()


async def test_health_shows_the_rows_counts_after_writes_by_another_process(
    backend: Backend, tmp_path: Path, aiohttp_client: Any
) -> None:
    """What an operator reads on ``/health`` is the catalog's rows counted, after an ingest and after a withdrawal by
    another process (the node's own catalog connection made neither write)."""
    from imagesvc.app import build_app
    from tests.library import settings_for

    overrides = {"catalog": backend.dialect, "text_model": "off"}
    if backend.dialect == "postgres":
        overrides["database_url"] = backend.settings["IMAGESVC_DATABASE_URL"]
    client = await aiohttp_client(build_app(settings_for(tmp_path, **overrides)))
    writer = backend.open()  # the ingester's or operator's connection

    async def shown() -> dict[str, int]:
        body = await (await client.get("/health")).json()
        return {k: body["catalog"][k] for k in ("books", "pages", "pages_without_image", "illustrations")}

    assert await shown() == {"books": 0, "pages": 0, "pages_without_image": 0, "illustrations": 0}
    _ingest(writer, "alpha", {1: "a sun", 3: "a dragon"}, dark=(2,))
    _ingest(writer, "beta", {2: "a moon"}, dark=(1, 3))
    direct = writer.counted()
    assert await shown() == {k: direct[k] for k in ("books", "pages", "pages_without_image", "illustrations")}
    assert await shown() == {"books": 2, "pages": 6, "pages_without_image": 3, "illustrations": 3}
    with writer.transaction() as conn:
        w.withdraw_book(conn, "beta")
    assert await shown() == {"books": 1, "pages": 3, "pages_without_image": 1, "illustrations": 2}
