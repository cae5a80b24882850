"""One run at a time of a catalog-wide job (``imagesvc index``), across processes and, with PostgreSQL, machines.

Two index runs at once would each publish a complete index, but the later one's clean-up removes the objects of
versions it does not know, so the other run's catalog row could name files that are gone. The lock writes nothing
to the catalog (a write would move the change stamp every node follows) and dies with the process that holds it:

- SQLite: an ``flock`` on a file beside the catalog (every writer of one SQLite file shares a filesystem);
- PostgreSQL: a session advisory lock on a connection of its own, held for the run; the server frees it when the
  connection ends, a killed process included.
"""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["RunLocked", "exclusive_run"]


class RunLocked(RuntimeError):
    """Another process holds the lock; the message says who, where the backend can tell."""


def _key(name: str) -> int:
    """A stable signed 64-bit advisory-lock key for ``name``."""
    return int.from_bytes(hashlib.sha256(f"imagesvc:{name}".encode()).digest()[:8], "big", signed=True)


def _holder() -> str:
    return f"pid {os.getpid()} on {socket.gethostname()}"


@contextmanager
def _file_lock(path: Path, name: str) -> Iterator[None]:
    import fcntl

    lock_path = path.with_name(f"{path.name}.{name}.lock")
    with open(lock_path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise RunLocked(f"another `imagesvc {name}` is running ({holder})") from None
        handle.seek(0)
        handle.truncate()
        handle.write(_holder())
        handle.flush()
        try:
            yield
        finally:
            handle.truncate(0)
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def _advisory_lock(url: str, name: str) -> Iterator[None]:
    import psycopg

    with psycopg.connect(url, autocommit=True, application_name=f"imagesvc {name}: {_holder()}") as conn:
        taken = conn.execute("SELECT pg_try_advisory_lock(%s)", (_key(name),)).fetchone()
        if not (taken and taken[0]):
            row = conn.execute(
                "SELECT a.application_name, a.client_addr::text FROM pg_locks l"
                " JOIN pg_stat_activity a ON a.pid = l.pid"
                " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1"
                " AND ((l.classid::bigint << 32) | l.objid::bigint) = %s",
                (_key(name),),
            ).fetchone()
            holder = (row[0] or row[1]) if row else "another process"
            raise RunLocked(f"another `imagesvc {name}` is running ({holder})")
        try:
            yield
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_key(name),))


@contextmanager
def exclusive_run(catalog: Any, name: str) -> Iterator[None]:
    """Hold the catalog-wide lock ``name`` for the ``with`` block; raise :class:`RunLocked` at once if it is held."""
    if catalog.dialect == "postgres":
        with _advisory_lock(catalog.url, name):
            yield
    elif str(catalog.path) == ":memory:":
        yield  # a private in-memory catalog: no other process can reach it
    else:
        with _file_lock(Path(catalog.path), name):
            yield
