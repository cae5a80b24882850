"""The catalog's schema as ordered migrations, one SQL file each per dialect (``migrations/sqlite/*.sql``,
``migrations/postgres/*.sql``): file ``000N_*.sql`` takes a catalog from version N-1 to N in both.

SQLite records the version in ``PRAGMA user_version``; PostgreSQL in ``schema_version`` (``catalog.postgres``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from importlib import resources
from typing import Any

__all__ = [
    "FOLLOW_UPS",
    "MIGRATIONS",
    "POSTGRES_FOLLOW_UPS",
    "POSTGRES_MIGRATIONS",
    "SCHEMA_VERSION",
    "migrate",
    "migrations",
]


def migrations(dialect: str) -> tuple[str, ...]:
    """The migration scripts of ``dialect`` (``sqlite`` or ``postgres``) in version order."""
    folder = resources.files("imagesvc.catalog") / "migrations" / dialect
    files = sorted(f for f in folder.iterdir() if f.name.endswith(".sql"))
    for version, file in enumerate(files, start=1):
        if not file.name.startswith(f"{version:04d}_"):
            raise RuntimeError(f"catalog migration {file.name} is out of sequence: expected {version:04d}_*.sql")
    return tuple(f.read_text(encoding="utf-8") for f in files)


MIGRATIONS: tuple[str, ...] = migrations("sqlite")
POSTGRES_MIGRATIONS: tuple[str, ...] = migrations("postgres")
SCHEMA_VERSION = len(MIGRATIONS)
if len(POSTGRES_MIGRATIONS) != SCHEMA_VERSION:
    raise RuntimeError(
        f"the catalog has {SCHEMA_VERSION} SQLite migrations but {len(POSTGRES_MIGRATIONS)} PostgreSQL ones: "
        "every schema change is written in both dialects"
    )


def _index_page_text(conn: sqlite3.Connection) -> object:
    from imagesvc.catalog import page_text

    return page_text.build(conn)


# Work a SQLite migration needs beyond SQL, run in the same transaction, by the version it brings the catalog to: an
# existing catalog's pages are indexed when it gains the page index (the text is folded in Python).
FOLLOW_UPS: dict[int, Callable[[sqlite3.Connection], object]] = {7: _index_page_text}


def _index_page_texts_postgres(conn: Any) -> object:
    from imagesvc.catalog import page_text_sql

    return page_text_sql.build(conn)


# The same for PostgreSQL (``catalog.postgres.migrate_postgres``), called with its write connection (``?`` SQL).
POSTGRES_FOLLOW_UPS: dict[int, Callable[[Any], object]] = {7: _index_page_texts_postgres}


def migrate(conn: sqlite3.Connection) -> int:
    """Apply every migration newer than the file's ``user_version``; returns the version reached.

    A catalog written by a newer imagesvc is refused rather than silently misread. Two processes opening one file
    at once are safe: each migration runs in an immediate (write-locked) transaction that re-reads the version first.
    """
    for version in range(_version(conn), SCHEMA_VERSION):
        conn.execute("BEGIN IMMEDIATE")
        try:
            if _version(conn) <= version:  # else another process applied it while this one waited for the lock
                for statement in statements(MIGRATIONS[version]):
                    conn.execute(statement)
                if (follow_up := FOLLOW_UPS.get(version + 1)) is not None:
                    follow_up(conn)
                conn.execute(f"PRAGMA user_version = {version + 1}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return SCHEMA_VERSION


def statements(script: str) -> list[str]:
    """The complete SQLite statements of ``script`` (a trigger's body stays whole), comments dropped."""
    out, buffer = [], ""
    for line in script.splitlines(keepends=True):
        if not buffer and line.lstrip().startswith("--"):
            continue
        buffer += line
        if sqlite3.complete_statement(buffer):
            out.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        out.append(buffer.strip())
    return out


def _version(conn: sqlite3.Connection) -> int:
    current = conn.execute("PRAGMA user_version").fetchone()[0]
    if current > SCHEMA_VERSION:
        raise RuntimeError(
            f"the catalog has schema version {current}, newer than this imagesvc knows ({SCHEMA_VERSION}); "
            "upgrade imagesvc"
        )
    return int(current)
