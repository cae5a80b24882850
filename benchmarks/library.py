"""Catalogue browser benchmark: list_books' query (``catalog/library.py``) over a generated catalogue of 15,000 books,
beside a by-id book look-up (``Catalog.find_book``, the indexed read the service already does per request) measured
in the same run. Catalog reads run on the event loop, so these figures are how long one request holds it.

Usage: .venv/bin/python benchmarks/library.py [--books 15000] [--pages 100] [--repeat 50]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from imagesvc.catalog import Catalog, page_id
from imagesvc.catalog.library import BookFilters, query_books

__all__ = ["main"]


def generate(path: Path, books: int, pages: int) -> Catalog:
    """Books with years (some missing), languages, categories, translation dates and half-translated pages."""
    rnd = random.Random(1)
    catalog = Catalog(path)
    with catalog.transaction() as conn:
        for b in range(books):
            bid = f"{b:016x}"
            conn.execute(
                "INSERT INTO books (id, slug, title, author, author_id, language, year, institution, item_url,"
                " source_hash, ingested_at, translated_at, category) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    bid,
                    f"book-{b}",
                    f"Liber {rnd.choice(['de', 'super', 'contra'])} {rnd.randrange(10**6)}",
                    f"Auctor {b % 3000}",
                    f"auctor-{b % 3000}",
                    rnd.choice(["Latin", "German", "French", "Italian"]),
                    rnd.choice([None, 1450 + b % 350]),
                    f"Library {b % 40}",
                    "https://x.example",
                    "",
                    "",
                    rnd.choice([None, f"20{rnd.randrange(15, 26)}-{1 + b % 12:02d}-01"]),
                    rnd.choice(["alchemy", "botany", "astronomy", "medicine"]),
                ),
            )
            rows = [(page_id(bid, n), bid, n, "t" if n % 2 else None) for n in range(1, pages + 1)]
            conn.executemany("INSERT INTO pages (id, book_id, number, translation) VALUES (?, ?, ?, ?)", rows)
    return catalog


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Milliseconds of the fastest of ``repeat`` calls (after one warm-up): on a shared host the minimum is what the
    query costs, the rest is waiting for a core."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--books", type=int, default=15_000)
    parser.add_argument("--pages", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        catalog = generate(Path(tmp) / "catalog.sqlite3", args.books, args.pages)
        reference = timed(lambda: catalog.find_book("0000000000000007"), args.repeat)
        print(f"{args.books} books x {args.pages} pages; reference find_book by id: {reference:.2f} ms")
        cases = {
            "no filter (recent-translation)": (BookFilters(), None),
            "sort=title-asc": (BookFilters(), "title-asc"),
            "author_id": (BookFilters(author_id="auctor-7"), None),
            "search (two words)": (BookFilters(search="liber contra"), None),
            "year range, date_desc": (BookFilters(year_from=1500, year_to=1600), "date_desc"),
            "has_translation + language": (BookFilters(has_translation=True, language="latin"), None),
            "library + category": (BookFilters(library="library-3", category="botany"), None),
        }
        for name, (filters, sort) in cases.items():
            ms = timed(lambda f=filters, s=sort: query_books(catalog, f, sort=s, limit=50, offset=0), args.repeat)
            total = query_books(catalog, filters, sort=sort, limit=1, offset=0)[1]
            print(f"  {name:32s} total {total:6d}  {ms:7.2f} ms  ({ms / reference:6.0f}x reference)")
        catalog.close()


if __name__ == "__main__":
    main()
