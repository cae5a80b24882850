"""The counts ``/health`` shows, kept in ``book_counts`` (migration 11): what the migration's backfill costs on an
existing catalog, what a read costs against counting the rows, and what the triggers add to writing a book.

    .venv/bin/python benchmarks/book_counts.py DATA_DIR [--write-books 40]

``DATA_DIR`` is a catalog made by ``catalog_generate.py`` (SQLite, or PostgreSQL in ``DATA_DIR/pg``). When it is at
schema 10 (made by an imagesvc without ``book_counts``) the run migrates it and prints the migration's time and the
process's peak memory; then ``counts()`` (the kept numbers) against ``counted()`` (the rows counted, what each
catalog change cost before), checked equal; with ``--write-books N``, N generated books of 300 pages written into a
scratch catalog of the same backend with the counting triggers and N without them, in turns (the ratio is the
triggers' share of an ingest write; each kind goes first every other book).
"""

from __future__ import annotations

import argparse
import resource
import secrets
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.catalog_generate import make_book
from benchmarks.catalog_postgres import persistent_postgres
from imagesvc.catalog import Catalog
from imagesvc.catalog import writes as w
from imagesvc.catalog.schema import SCHEMA_VERSION

TRIGGERS = {
    "sqlite": [
        f"DROP TRIGGER book_counts_{name}"
        for name in ("book_ai", "book_ad", "page_ai", "page_ad", "page_au", "illustration_ai", "illustration_ad")
    ]
    + ["DROP TRIGGER book_counts_illustration_au"],
    "postgres": [
        "DROP TRIGGER book_counts_book ON books",
        "DROP TRIGGER book_counts_page ON pages",
        "DROP TRIGGER book_counts_illustration ON illustrations",
    ],
}


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _version(data_dir: Path, url: str | None) -> int:
    if url is None:
        conn = sqlite3.connect(data_dir / "catalog.sqlite3")
        try:
            return int(conn.execute("PRAGMA user_version").fetchone()[0])
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(url) as conn:
        return int(conn.execute("SELECT max(version) FROM schema_version").fetchone()[0])  # type: ignore[index]


def _open(data_dir: Path, url: str | None) -> Catalog:
    if url is None:
        return Catalog(data_dir / "catalog.sqlite3")
    from imagesvc.catalog.postgres import PostgresCatalog

    return PostgresCatalog(url, pool_size=2)


def _timed(read: Callable[[], Any], repeats: int) -> tuple[float, float, Any]:
    """Median wall and CPU (this process) milliseconds of ``read``, and its last answer."""
    walls, cpus, answer = [], [], None
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        answer = read()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls) * 1e3, statistics.median(cpus) * 1e3, answer


def _write_cost(dialect: str, url: str | None, books: int) -> None:
    """Write ``books`` generated books with the triggers and as many without, in turns, into scratch catalogs."""
    with tempfile.TemporaryDirectory(prefix="book-counts-") as scratch:
        catalogs: dict[str, Catalog] = {}
        scratch_databases: list[str] = []
        for kind in ("with triggers", "without"):
            if url is None:
                catalogs[kind] = Catalog(Path(scratch) / f"{kind.split()[0]}.sqlite3")
            else:
                import psycopg

                from imagesvc.catalog.postgres import PostgresCatalog

                name = f"book_counts_{secrets.token_hex(4)}"
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute(f"CREATE DATABASE {name}")  # type: ignore[arg-type]
                scratch_databases.append(name)
                catalogs[kind] = PostgresCatalog(url.rsplit("/", 1)[0] + f"/{name}", pool_size=2)
        with catalogs["without"].transaction() as conn:
            for statement in TRIGGERS[dialect]:
                conn.execute(statement)
        took: dict[str, list[float]] = {kind: [] for kind in catalogs}
        for n in range(books):
            book, rows = make_book((n, 300, 13, 1))
            for kind in sorted(catalogs, reverse=n % 2 == 1):  # each goes first every other book
                catalog = catalogs[kind]
                started = time.perf_counter()
                with catalog.transaction() as conn:
                    w.upsert_book(conn, book, "generated:1")
                    w.upsert_pages(conn, rows)
                took[kind].append(time.perf_counter() - started)
        for kind, catalog in catalogs.items():
            print(f"write a 300-page book ({kind}): median {statistics.median(took[kind]) * 1e3:.1f} ms, "
                  f"mean {statistics.mean(took[kind]) * 1e3:.1f} ms over {books}")  # fmt: skip
            catalog.close()
        for name in scratch_databases:  # the catalog's cluster keeps nothing of this run
            import psycopg

            with psycopg.connect(url, autocommit=True) as conn:  # type: ignore[arg-type]
                conn.execute(f"DROP DATABASE {name}")  # type: ignore[arg-type]
        with_t, without = statistics.median(took["with triggers"]), statistics.median(took["without"])
        print(f"triggers' share of a book's write: {with_t / without:.3f}x ({(with_t - without) * 1e3:+.1f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--write-books", type=int, default=0)
    args = parser.parse_args()
    server = persistent_postgres(args.data_dir / "pg") if (args.data_dir / "pg" / "pgdata").exists() else None
    url = server.url if server else None
    dialect = "postgres" if server else "sqlite"
    try:
        before = _version(args.data_dir, url)
        print(f"{dialect} {args.data_dir}: schema {before}; peak memory before opening {_peak_mb():.0f} MB")
        started, cpu = time.perf_counter(), time.process_time()
        catalog = _open(args.data_dir, url)
        took, cpu = time.perf_counter() - started, time.process_time() - cpu
        try:
            kept = catalog.counts()
            if before < SCHEMA_VERSION:
                per = took / (kept["pages"] / 1e6) if kept["pages"] else 0.0
                print(f"migrated {before} -> {SCHEMA_VERSION} in {took:.2f} s (CPU of this process {cpu:.2f} s) for "
                      f"{kept['books']} books, {kept['pages']} pages, {kept['illustrations']} illustrations: "
                      f"{per:.2f} s per million pages; peak memory {_peak_mb():.0f} MB")  # fmt: skip
            wall_k, cpu_k, kept = _timed(catalog.counts, args.repeats)
            wall_c, cpu_c, counted = _timed(catalog.counted, args.repeats)
            assert kept == counted, (kept, counted)
            print(f"counts(): kept {wall_k:.1f} ms (CPU {cpu_k:.1f} ms), rows counted {wall_c:.1f} ms "
                  f"(CPU {cpu_c:.1f} ms), {wall_c / wall_k:.0f}x; the same numbers: {kept}")  # fmt: skip
        finally:
            catalog.close()
        if args.write_books:
            _write_cost(dialect, url, args.write_books)
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
