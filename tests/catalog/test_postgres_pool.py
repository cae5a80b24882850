"""The PostgreSQL catalog's pool under pressure: when every connection is taken, a read waits the bounded pool
timeout and then answers ``Unavailable`` (503); once connections free up, reads succeed again."""

from __future__ import annotations

import secrets
import threading
import time

import pytest

from imagesvc.catalog.postgres import PostgresCatalog
from imagesvc.errors import Unavailable
from tests.servers import PostgresServer, create_database


def test_an_exhausted_pool_answers_unavailable_after_a_bounded_wait(postgres_server: PostgresServer) -> None:
    url = create_database(postgres_server, f"pool_{secrets.token_hex(5)}")
    catalog = PostgresCatalog(url, pool_size=2, pool_timeout=0.5)
    try:
        holders = [threading.Thread(target=catalog.scalar, args=("SELECT pg_sleep(3)",)) for _ in range(2)]
        for holder in holders:
            holder.start()
        time.sleep(0.5)  # both connections are now held by slow statements
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
