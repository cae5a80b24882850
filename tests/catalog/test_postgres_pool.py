"""The PostgreSQL catalog's pool under pressure: when every connection is taken, a read waits the bounded pool
timeout and then answers ``Unavailable`` (503, busy, not an outage); once connections free up, reads succeed again.
A write the server rolls back for a conflict is reported as that, not as a lost connection."""

from __future__ import annotations

import secrets
import threading
import time

import psycopg
import pytest

from imagesvc.catalog.postgres import PostgresCatalog
from imagesvc.errors import Unavailable
from tests.servers import PostgresServer, create_database


def _wait_until_running(server: PostgresServer, statement: str, count: int) -> None:
    """Until ``count`` sessions of ``server`` are running ``statement`` (seen in ``pg_stat_activity`` by a session
    of the server's superuser, outside any pool); a bound only a hang reaches."""
    deadline = time.monotonic() + 60
    with psycopg.connect(server.url, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE state = 'active' AND position(%s in query) > 0 AND pid <> pg_backend_pid()",
                (statement,),
            ).fetchone()
            if row is not None and row[0] >= count:
                return
            assert time.monotonic() < deadline, f"{count} sessions never ran {statement!r}"
            time.sleep(0.02)


def test_an_exhausted_pool_answers_unavailable_after_a_bounded_wait(postgres_server: PostgresServer) -> None:
    url = create_database(postgres_server, f"pool_{secrets.token_hex(5)}")
    catalog = PostgresCatalog(url, pool_size=2, pool_timeout=0.5)
    try:
        holders = [threading.Thread(target=catalog.scalar, args=("SELECT pg_sleep(3)",)) for _ in range(2)]
        for holder in holders:
            holder.start()
        _wait_until_running(postgres_server, "SELECT pg_sleep(3)", 2)  # both connections held by slow statements
        started = time.monotonic()
        with pytest.raises(Unavailable, match="busy") as caught:
            catalog.counts()
        waited = time.monotonic() - started
        assert 0.4 <= waited < 2.0, waited
        assert caught.value.status == 503 and caught.value.code == "unavailable"
        for holder in holders:
            holder.join()
        assert catalog.counts()["books"] == 0  # served again once connections are free
    finally:
        catalog.close()


def test_a_statement_past_its_timeout_is_unavailable_not_a_hang(postgres_server: PostgresServer) -> None:
    url = create_database(postgres_server, f"slow_{secrets.token_hex(5)}")
    catalog = PostgresCatalog(url, pool_size=2, statement_timeout_ms=300)
    try:
        started = time.monotonic()
        with pytest.raises(Unavailable, match="took too long"):
            catalog.scalar("SELECT pg_sleep(5)")
        assert time.monotonic() - started < 2.0
        assert catalog.scalar("SELECT 1") == 1  # the connection is still usable
    finally:
        catalog.close()


def _role_database(server: PostgresServer, connections: int) -> str:
    """A database owned by a new role that may hold at most ``connections`` connections (as a server near its
    ``max_connections`` allows no more); its URL, as that role."""
    name, role = f"limit_{secrets.token_hex(5)}", f"r_{secrets.token_hex(5)}"
    url = create_database(server, name)
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT {connections}")
        admin.execute(f"ALTER DATABASE {name} OWNER TO {role}")
        admin.execute(f"ALTER SCHEMA public OWNER TO {role}")
    return url.replace("postgres@", f"{role}@")


def test_a_saturated_pool_is_busy_not_an_outage_and_opens_no_connection_past_its_size(
    postgres_server: PostgresServer,
) -> None:
    """With every pooled connection taken and the server taking no more, a read is answered "busy" after the pool
    timeout; the catalog was declared unreachable (failing every call fast) by a probe connection past the pool."""
    url = _role_database(postgres_server, connections=2)
    # The pool timeout leaves a loaded host time to open both connections for the holders; their statements outlast
    # it, so the read below finds every connection taken for the whole of its wait.
    catalog = PostgresCatalog(url, pool_size=2, pool_timeout=3)
    failures: list[BaseException] = []

    def hold() -> None:
        try:
            catalog.scalar("SELECT pg_sleep(8)")
        except Exception as exc:  # reported below, not lost in the thread
            failures.append(exc)

    try:
        holders = [threading.Thread(target=hold) for _ in range(2)]
        for holder in holders:
            holder.start()
        _wait_until_running(postgres_server, "SELECT pg_sleep(8)", 2)  # both connections (all the role may hold)
        with pytest.raises(Unavailable, match="busy") as caught:
            catalog.counts()
        assert caught.value.headers["Retry-After"] == "1"
        for holder in holders:
            holder.join()
        assert not failures, failures
        assert catalog.counts()["books"] == 0  # served at once: no outage was declared
    finally:
        catalog.close()


def test_a_deadlocked_write_is_reported_as_a_conflict_not_a_lost_connection(postgres_server: PostgresServer) -> None:
    url = create_database(postgres_server, f"dead_{secrets.token_hex(5)}")
    catalog = PostgresCatalog(url, pool_size=4)
    try:
        with catalog.transaction(search=False) as tx:
            tx.execute("CREATE TABLE pair (id INTEGER PRIMARY KEY, v INTEGER)")
            tx.execute("INSERT INTO pair VALUES (1, 0), (2, 0)")
        both_locked = threading.Barrier(2)
        errors: list[BaseException] = []

        def write(first: int, second: int) -> None:
            try:
                with catalog.transaction(search=False) as tx:
                    tx.execute("UPDATE pair SET v = v + 1 WHERE id = ?", (first,))
                    both_locked.wait(5)
                    tx.execute("UPDATE pair SET v = v + 1 WHERE id = ?", (second,))
            except Exception as exc:
                errors.append(exc)

        writers = [threading.Thread(target=write, args=order) for order in ((1, 2), (2, 1))]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join(30)
        (error,) = errors  # the server broke the deadlock by rolling one back
        assert isinstance(error, Unavailable) and error.status == 503 and error.headers["Retry-After"] == "1"
        assert "conflicted" in error.detail and "deadlock" in error.detail.lower(), error.detail  # the log's words
        assert "lost" not in error.detail
        assert catalog.scalar("SELECT sum(v) FROM pair") == 2  # the other write committed; the catalog serves on
    finally:
        catalog.close()


def test_every_statement_is_planned_for_its_own_arguments(postgres_server: PostgresServer) -> None:
    """psycopg prepares a statement run five times on a connection; the server may then plan it once for any
    arguments. For a book's page search that generic plan read a common word's index entries across the whole
    library (0.3-0.8 s a search at 4.5 million pages instead of 2-5 ms): the catalog's connections must plan each
    execution for its arguments, however often a statement runs."""
    url = create_database(postgres_server, f"plans_{secrets.token_hex(5)}")
    catalog = PostgresCatalog(url, pool_size=1)  # one connection: every statement below runs on it
    try:
        search = (
            "SELECT number, field FROM page_texts WHERE book_id = ? AND terms @> ARRAY[?]::text[] AND field = ANY(?)"
        )
        for n in range(12):
            catalog.query_all(search, (f"{n:016x}", "gold", [0, 1, 2]))
        plans = catalog.query_one(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE '%page_texts%'"
        )
        assert plans is not None, "the statement was not prepared: the test no longer exercises the plan cache"
        assert plans["generic_plans"] == 0 and plans["custom_plans"] >= 7, plans
    finally:
        catalog.close()
