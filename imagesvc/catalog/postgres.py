"""The PostgreSQL catalog: the ``Catalog`` protocol over a pool of connections to one database shared by every node
and ingester (``IMAGESVC_CATALOG=postgres``).

Why a synchronous pool (psycopg 3 with psycopg-pool) rather than an async driver: the catalog protocol is
synchronous and called from every door (tools, pages, access, search) and from worker threads (search builds, ingest),
and its reads are indexed look-ups of a fraction of a millisecond. The event loop reaches it through ``gate``
(``imagesvc.catalog.gate``): threads of its own, as many as the pool has connections, under a client-side deadline,
since a hung server (stopped, or a statement behind another session's lock) enforces no timeout of its own. A
connection is held for one statement (or one write transaction) and returned at once, never across an ``await``. Each
connection is checked (a round trip) before it is used, so connections a server restart left dead are replaced
rather than handed to a request. Further bounds: a free connection (``IMAGESVC_DATABASE_POOL_TIMEOUT``), a
connection attempt (``connect_timeout``) and, when serving, a statement (``statement_timeout``); past any bound the
caller gets ``Unavailable`` (503 ``unavailable``), whose message never names the server's host or port.

An outage is answered without waiting: after a connection fails, every call fails fast with ``Unavailable`` while
a background thread probes the server; when it answers, the pool drops its broken connections and serving resumes
with no restart. A serving process opens the catalog lazily (``lazy=True``): it starts while the server is down or
hung, migrates on the first call that reaches it, and answers 503 until then.

The shared SQL uses ``?`` and ``:name`` parameters (SQLite's); they are translated to psycopg's once per statement
text. ``PRAGMA data_version`` (what search state polls) reads ``catalog_state.changes``, which every committed
write transaction increments (``transaction(search=False)`` leaves it alone: API keys).
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from imagesvc.catalog import Catalog, _row, page_text_sql
from imagesvc.catalog.gate import DEFAULT_DEADLINE, CatalogGate
from imagesvc.catalog.page_rank import SearchWork
from imagesvc.catalog.schema import POSTGRES_FOLLOW_UPS, POSTGRES_MIGRATIONS, SCHEMA_VERSION
from imagesvc.catalog.text_fold import Word
from imagesvc.errors import CatalogUnavailable as Unavailable  # every outage here is the catalog database's

__all__ = ["MIGRATION_LOCK", "PostgresCatalog", "migrate_postgres", "translate"]

log = logging.getLogger("imagesvc.catalog.postgres")

MIGRATION_LOCK = 0x1A6E5C  # the advisory lock key every imagesvc process takes to migrate one database
_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_PRAGMAS = {"PRAGMA data_version": "SELECT changes AS data_version FROM catalog_state WHERE id = 1"}
_DOWN = (psycopg.OperationalError, psycopg.InterfaceError)
# SQLSTATEs of OperationalErrors that say nothing of the connection: class 40, a transaction rolled back (deadlock
# detected, serialization failure), and 55P03, a lock not granted in time. The server answered; nothing needs
# probing. (psycopg derives DeadlockDetected and SerializationFailure from OperationalError, not TransactionRollback.)
_CONTENDED = ("40", "55P03")


@functools.lru_cache(maxsize=1024)
def translate(sql: str) -> str:
    """SQLite-style SQL (``?``, ``:name``) as psycopg's (``%s``, ``%(name)s``); the pragmas search state reads as
    their PostgreSQL equivalents."""
    if sql.strip() in _PRAGMAS:
        return _PRAGMAS[sql.strip()]
    sql = sql.replace("%", "%%").replace("?", "%s")
    return _NAMED.sub(r"%(\1)s", sql)


class _Conn:
    """A write transaction's connection with sqlite3's ``execute``/``executemany`` (translated SQL); ``dialect``
    tells ``writes`` which page-text index to keep."""

    dialect = "postgres"

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.raw = conn

    def execute(self, sql: str, args: Any = ()) -> psycopg.Cursor[Any]:
        return self.raw.execute(translate(sql), args if isinstance(args, dict) else tuple(args))  # type: ignore[arg-type]

    def executemany(self, sql: str, rows: Iterable[Any]) -> psycopg.Cursor[Any]:
        cursor = self.raw.cursor()
        cursor.executemany(translate(sql), [r if isinstance(r, dict) else tuple(r) for r in rows])  # type: ignore[arg-type]
        return cursor


def migrate_postgres(conn: psycopg.Connection[Any]) -> int:
    """Bring the database to the current schema under an advisory lock, so that nodes starting together migrate it
    once: the others wait, then find it current. Refuses a database written by a newer imagesvc."""
    conn.autocommit = True
    conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        current = conn.execute("SELECT max(version) FROM schema_version").fetchone()[0] or 0  # type: ignore[index]
        if current > SCHEMA_VERSION:
            raise RuntimeError(
                f"the catalog database has schema version {current}, newer than this imagesvc knows "
                f"({SCHEMA_VERSION}); upgrade imagesvc"
            )
        for version in range(current, SCHEMA_VERSION):
            with conn.transaction():
                conn.execute(POSTGRES_MIGRATIONS[version])  # type: ignore[arg-type]
                if (follow_up := POSTGRES_FOLLOW_UPS.get(version + 1)) is not None:
                    follow_up(_Conn(conn))
                conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (version + 1,))
            log.info("catalog database migrated to schema %d", version + 1)
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
    return SCHEMA_VERSION


class PostgresCatalog(Catalog):
    """The catalog in one PostgreSQL database, through a pool of at most ``pool_size`` connections; migrated on open,
    or on the first call that reaches the server when ``lazy``."""

    dialect = "postgres"

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 10,
        pool_timeout: float = 2.0,
        connect_timeout: float = 3.0,
        statement_timeout_ms: int = 0,
        probe_interval: float = 0.5,
        deadline: float = DEFAULT_DEADLINE,
        lazy: bool = False,
        guard: bool = False,
    ) -> None:
        self.gate = CatalogGate(self.ping, deadline=deadline, threads=pool_size, guard=guard)
        self.url = url
        self.path = None  # no file: ``reader`` shares this (thread-safe) catalog with worker threads
        self._pool_timeout = pool_timeout
        self._probe_interval = probe_interval
        self._connect_timeout = connect_timeout
        # Every statement is planned for its own arguments. psycopg prepares a statement run five times on a
        # connection, and the server may then switch it to one generic plan for all arguments: for a book's page
        # search that plan reads a common term's GIN entries for the whole library instead of the book's key range
        # (0.3-0.8 s a search at 4.5 million pages, against 2-5 ms planned per call; benchmarks/catalog_scale.py).
        options = "-c plan_cache_mode=force_custom_plan"
        if statement_timeout_ms:
            options += f" -c statement_timeout={statement_timeout_ms}"
        kwargs: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": max(1, round(connect_timeout)),
            "options": options,
        }
        self.schema_version: int | None = None
        self._schema_lock = threading.Lock()
        if not lazy:
            self.migrate()
        self._down = threading.Event()  # set while the server is unreachable: calls fail fast
        self._closing = threading.Event()
        self._probe: threading.Thread | None = None
        self._lock = threading.Lock()
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=max(1, pool_size),
            kwargs=kwargs,
            timeout=pool_timeout,
            open=True,
            name="imagesvc-catalog",
        )

    def close(self) -> None:
        self.gate.close()
        self._closing.set()
        self._pool.close()

    def migrate(self) -> int:
        """Bring the database to the current schema, once per catalog (migrations, index builds on a large catalog,
        run without the serving statement timeout); ``Unavailable`` when the server cannot be reached."""
        try:
            return self._migrated()
        except _DOWN as exc:
            raise _unreachable(exc) from exc

    def _migrated(self) -> int:
        """``migrate`` with the driver's errors as they are."""
        with self._schema_lock:
            if self.schema_version is None:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=self._connect_seconds) as conn:
                    self.schema_version = migrate_postgres(conn)
        return self.schema_version

    @property
    def _connect_seconds(self) -> int:
        return max(1, round(self._connect_timeout))

    # -- outages ---------------------------------------------------------------------------------------------------

    def _check_up(self) -> None:
        if self._down.is_set():
            raise _unreachable()

    def _failed(self, exc: BaseException) -> Unavailable:
        """Note an outage (start the probe) and the error to raise for it."""
        with self._lock:
            if not self._down.is_set():
                log.error("catalog database unreachable, answering 503 until it is back: %s", _reason(exc))
                self._down.set()
                self._probe = threading.Thread(target=self._watch, name="imagesvc-catalog-probe", daemon=True)
                self._probe.start()
        return _unreachable(exc)

    def _watch(self) -> None:
        """Probe the server with a connection of its own until it answers; then drop the pool's dead connections."""
        while not self._closing.wait(self._probe_interval):
            try:
                with psycopg.connect(self.url, connect_timeout=self._connect_seconds) as conn:
                    conn.execute("SELECT 1")
            except _DOWN:
                continue
            try:
                self._pool.check()  # close the connections broken by the outage, open fresh ones
            except Exception:  # the pool reports its own troubles; serving decides on the next call
                log.exception("catalog pool check after an outage failed")
            self._down.clear()
            log.warning("catalog database reachable again")
            return

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection; ``Unavailable`` for a full pool (after the bounded wait), a statement past its
        timeout, a write rolled back by a conflict (deadlock, serialization, lock wait), or an unreachable server
        (which also opens the outage); ``_Broken`` for one dead connection."""
        self.gate.off_loop()
        self._check_up()
        if self.schema_version is None:  # a lazy catalog's first call that reaches the server
            try:
                self._migrated()
            except _DOWN as exc:
                raise self._failed(exc) from exc
        try:
            with self._checked() as conn:
                yield conn
        except PoolTimeout as exc:
            # Busy, not down: a probe here would wait a connect timeout more on the event loop and open a connection
            # past the pool's size just when the server is saturated. An outage shows as a failed statement on a
            # pooled connection, which starts the background probe.
            raise Unavailable(
                f"The catalog database is busy: no free connection within {self._pool_timeout:g} s.", retry_after=1
            ) from exc
        except psycopg.errors.QueryCanceled as exc:
            raise Unavailable(f"A catalog query took too long: {_reason(exc)}", retry_after=1) from exc
        except _DOWN as exc:
            if (getattr(exc, "sqlstate", None) or "").startswith(_CONTENDED):
                raise Unavailable(
                    f"A catalog write conflicted with a concurrent one and was rolled back: {_reason(exc)}",
                    retry_after=1,
                    recovery=["Send the request again: the conflicting write has finished by then."],
                ) from exc
            if not self._server_answers():
                raise self._failed(exc) from exc
            log.warning("a catalog database connection was lost: %s", _reason(exc))
            raise _Broken("A catalog database connection was lost.", retry_after=1) from exc

    @contextmanager
    def _checked(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection that answered a round trip just now (as ``pool.connection``, within the pool timeout).

        A server restart leaves every pooled connection dead. The pool's own ``check`` callback replaces a dead one
        but then backs off about a second before trying the next (2 s for the first request after a quiet restart
        with four pooled, past the catalog deadline); here the first dead one found sends every idle connection
        through one check pass (dead ones fail at once and are replaced), and the next is taken at once."""
        deadline = time.monotonic() + self._pool_timeout
        while True:
            conn = self._pool.getconn(timeout=deadline - time.monotonic())
            try:
                ConnectionPool.check_connection(conn)
            except psycopg.Error:
                self._pool.putconn(conn)  # broken: the pool discards it and opens another
                self._pool.check()
                continue
            break
        try:
            with conn:
                yield conn
        finally:
            self._pool.putconn(conn)

    def _read(self, sql: str, args: Iterable[Any], fetch: str) -> Any:
        """One read statement; retried once on a fresh connection when the first one was dead (a server restart
        leaves every pooled connection dead; the pool drops one that failed)."""
        params = tuple(args)
        for attempt in (1, 2):
            try:
                with self._connection() as conn:
                    cursor = conn.cursor(row_factory=dict_row) if fetch != "tuples" else conn.cursor()
                    cursor.execute(translate(sql), params)  # type: ignore[arg-type]
                    return cursor.fetchone() if fetch == "one" else cursor.fetchall()
            except _Broken:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _server_answers(self) -> bool:
        """Does the server take a new connection now (bounded by ``connect_timeout``)?"""
        try:
            with psycopg.connect(self.url, connect_timeout=self._connect_seconds) as conn:
                conn.execute("SELECT 1")
        except _DOWN:
            return False
        return True

    # -- the protocol's primitives ---------------------------------------------------------------------------------

    @contextmanager
    def transaction(self, *, search: bool = True) -> Iterator[Any]:
        """A write transaction (READ COMMITTED) that bumps the change counter unless ``search=False`` (API keys).

        The counter's row is locked first, so catalog writers commit one after another in the order they began: the
        change feed's sequence numbers (``book_changes``) are then in commit order, and a harvester that has read up
        to one never finds a lower one appear later. Ingesters upload their objects before their transaction, so
        only the rows' writing is serialised."""
        with self._connection() as conn, conn.transaction():
            if search:
                conn.execute("UPDATE catalog_state SET changes = changes + 1 WHERE id = 1")
            yield _Conn(conn)

    def query_one(self, sql: str, args: Iterable[Any] = ()) -> dict[str, Any] | None:
        return _row(self._read(sql, args, "one"))  # type: ignore[arg-type]

    def query_all(self, sql: str, args: Iterable[Any] = ()) -> list[dict[str, Any]]:
        return [_row(r) for r in self._read(sql, args, "all")]  # type: ignore[misc]

    def scalar(self, sql: str, args: Iterable[Any] = ()) -> Any:
        rows = self._read(sql, args, "tuples")
        return rows[0][0] if rows else None

    def column(self, sql: str, args: Iterable[Any] = ()) -> list[Any]:
        return [r[0] for r in self._read(sql, args, "tuples")]

    def tuples(self, sql: str, args: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        return self._read(sql, args, "tuples")  # type: ignore[no-any-return]

    def data_version(self) -> Any:
        return self.scalar("SELECT changes FROM catalog_state WHERE id = 1")

    def change_stamp(self) -> Any:
        """The change counter: every write transaction but API keys' moves it, whichever process committed it."""
        return self.data_version()

    def stream(self, sql: str, args: Iterable[Any] = ()) -> Iterator[tuple[Any, ...]]:
        """Rows of a large read through a server-side cursor (a bounded batch in memory at a time)."""
        name = f"imagesvc_stream_{threading.get_ident()}_{time.monotonic_ns()}"
        with self._connection() as conn, conn.transaction(), conn.cursor(name=name) as cursor:
            cursor.itersize = 2000
            cursor.execute(translate(sql), tuple(args))  # type: ignore[arg-type]
            yield from cursor

    def page_list(self, book_id: str) -> list[dict[str, Any]]:
        """As on SQLite; the NULL tests read the table, whose rows are small here (the texts live in TOAST)."""
        return self.query_all(
            "SELECT id, book_id, number, image_unavailable, unavailable_reason, width, height,"
            " (ocr IS NOT NULL)::int AS has_ocr, (translation IS NOT NULL)::int AS has_translation,"
            " (original IS NOT NULL)::int AS has_original FROM pages WHERE book_id = ? ORDER BY number",
            (book_id,),
        )

    def search_pages(
        self,
        book_id: str,
        words: list[Word],
        fields: list[str],
        *,
        limit: int,
        offset: int,
        work: SearchWork | None = None,
    ) -> tuple[list[tuple[int, float, tuple[str, ...]]], int]:
        """As on SQLite, over the ``page_texts`` table (``page_text_sql.search``)."""
        return page_text_sql.search(self, book_id, words, fields, limit=limit, offset=offset, work=work)


class _Broken(Unavailable):
    """One pooled connection was dead while the server answers (after a restart): a read retries once."""


def _unreachable(exc: BaseException | None = None) -> Unavailable:
    """The error of an outage. Its public message names only the catalog database (``CatalogUnavailable``); the
    driver's reason, which names the server's host and port, is its detail, for the log and operators."""
    reason = f": {_reason(exc)}" if exc is not None else ""
    return Unavailable(f"The catalog database cannot be reached{reason}.", retry_after=2)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
