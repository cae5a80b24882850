"""The catalog's reads on SQLite and PostgreSQL in the same run: p50/p95 of the reads a request makes, with the
PostgreSQL/SQLite ratio, and how long a write by one process (an ingester, ``keys revoke``) takes to be read by
another (a second node).

Run: ``.venv/bin/python benchmarks/catalog_backends.py [--books 200] [--pages 100] [--reads 2000]``. It starts a
private PostgreSQL (tests/servers.py, Debian's postgresql package) on loopback and writes the same generated books
through the catalog layer into both backends (page text ~5.4 KB, one illustration every tenth page).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from imagesvc.catalog import Catalog, illustration_id, page_id
from imagesvc.catalog import writes as w
from imagesvc.catalog.api_keys import create_key, lookup_key, revoke_key
from imagesvc.catalog.library import BookFilters, query_books
from imagesvc.catalog.postgres import PostgresCatalog
from imagesvc.search.text import text_search
from tests.servers import start_postgres

WORDS = [
    "sun",
    "moon",
    "herb",
    "root",
    "furnace",
    "serpent",
    "map",
    "river",
    "mine",
    "star",
    "sphere",
    "tree",
    "dragon",
    "garden",
    "vessel",
    "tower",
]


def fill(catalog: Catalog, books: int, pages: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    text = " ".join(rng.choice(WORDS) for _ in range(900))  # ~5.4 KB a page
    for n in range(books):
        book_id = f"{n:016x}"
        book = {
            "id": book_id,
            "slug": f"book-{n}",
            "title": f"{rng.choice(WORDS).title()} {rng.choice(WORDS)} {n}",
            "author": f"Author {n % 97}",
            "language": "Latin",
            "year": 1450 + n % 300,
            "attribution": {"institution": f"Library {n % 7}", "item_url": "https://x.example/i"},
        }
        with catalog.transaction() as conn:
            w.upsert_book(conn, book, "h")
            for number in range(1, pages + 1):
                pid = page_id(book_id, number)
                row = {
                    "id": pid, "book_id": book_id, "number": number, "ocr": text, "translation": text[:2000],
                    "original": None, "image_unavailable": int(number % 50 == 0), "unavailable_reason": None,
                    "master_key": f"m/{pid}", "master_sha256": "0" * 64, "master_format": "jpeg",
                    "derivation": "d", "width": 100, "height": 150,
                }  # fmt: skip
                tiers = {"thumb": {"clean_key": f"c/{pid}", "public_key": f"p/{pid}", "width": 1, "height": 1,
                                   "bytes": 1, "sha256": "f" * 64}}  # fmt: skip
                illus = []
                if number % 10 == 0:
                    description = " ".join(rng.choice(WORDS) for _ in range(12))
                    illus.append({"id": illustration_id(book_id, number, 0), "index": 0,
                                  "bbox": {"x": 0, "y": 0, "width": 1, "height": 1}, "type": "woodcut",
                                  "description": description, "subjects": [rng.choice(WORDS)]})  # fmt: skip
                w.upsert_page(conn, row, {pid: tiers}, illus)


def timed(fn: Callable[[], Any], reads: int) -> tuple[float, float]:
    laps = []
    for _ in range(reads):
        start = time.perf_counter()
        fn()
        laps.append((time.perf_counter() - start) * 1000)
    laps.sort()
    return statistics.median(laps), laps[int(len(laps) * 0.95)]


def reads(catalog: Catalog, books: int, pages: int, n: int) -> dict[str, tuple[float, float]]:
    rng = random.Random(3)
    key, _ = create_key(catalog, "full")

    def book() -> str:
        return f"book-{rng.randrange(books)}"

    def pages_50() -> None:
        found = catalog.find_book(book(), counts=False)
        start = rng.randrange(1, max(2, pages - 50))
        catalog.pages(found["id"], start, start + 49)  # type: ignore[index]

    return {
        "find_book": timed(lambda: catalog.find_book(book()), n),
        "page_image": timed(lambda: catalog.page_image(book(), rng.randrange(1, pages + 1), "thumb"), n),
        "lookup_key": timed(lambda: lookup_key(catalog, key), n),
        "pages (50, with text)": timed(pages_50, max(1, n // 4)),
        "list_books search": timed(
            lambda: query_books(catalog, BookFilters(search=rng.choice(WORDS)), sort=None, limit=50, offset=0),
            max(1, n // 10),
        ),
        "illustration text search": timed(lambda: text_search(catalog, rng.choice(WORDS)), max(1, n // 10)),
        "counts (/health)": timed(catalog.counts, max(1, n // 50)),
    }


def propagation(writer: Catalog, reader: Catalog) -> dict[str, float]:
    """Milliseconds from a write committing on one connection to another connection reading it."""
    key, record = create_key(writer, "full")
    revoke_key(writer, record.id)
    start = time.perf_counter()
    while lookup_key(reader, key).state() != "revoked":  # type: ignore[union-attr]
        time.sleep(0.001)
    revoked = (time.perf_counter() - start) * 1000
    before = reader.query_one("PRAGMA data_version")
    with writer.transaction() as conn:
        w.withdraw_book(conn, "0000000000000000")
    start = time.perf_counter()
    while reader.query_one("PRAGMA data_version") == before or reader.find_book("book-0") is not None:
        time.sleep(0.001)
    return {
        "revoked key refused": revoked,
        "withdrawal seen (and search state told)": (time.perf_counter() - start) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--books", type=int, default=200)
    parser.add_argument("--pages", type=int, default=100)
    parser.add_argument("--reads", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server, stop = start_postgres(Path(tmp) / "pg")
        try:
            backends = {
                "sqlite": (lambda: Catalog(Path(tmp) / "catalog.sqlite3")),
                "postgres": (lambda: PostgresCatalog(server.url)),
            }
            results: dict[str, dict[str, tuple[float, float]]] = {}
            spread: dict[str, dict[str, float]] = {}
            for name, opener in backends.items():
                catalog = opener()
                started = time.perf_counter()
                fill(catalog, args.books, args.pages)
                print(f"{name}: wrote {args.books} books x {args.pages} pages in {time.perf_counter() - started:.1f} s")
                results[name] = reads(catalog, args.books, args.pages, args.reads)
                second = opener()
                spread[name] = propagation(catalog, second)
                second.close()
                catalog.close()
        finally:
            stop()
    print(f"\n{args.books} books x {args.pages} pages; milliseconds, p50 / p95\n")
    print("| read | SQLite | PostgreSQL | PostgreSQL/SQLite p50 |")
    print("|---|---|---|---|")
    for read in results["sqlite"]:
        s, p = results["sqlite"][read], results["postgres"][read]
        print(f"| {read} | {s[0]:.3f} / {s[1]:.3f} | {p[0]:.3f} / {p[1]:.3f} | {p[0] / s[0]:.1f}x |")
    print("\n| a write by one process read by another | SQLite (one file) | PostgreSQL |")
    print("|---|---|---|")
    for what in spread["sqlite"]:
        print(f"| {what} | {spread['sqlite'][what]:.1f} ms | {spread['postgres'][what]:.1f} ms |")


if __name__ == "__main__":
    main()
