"""What one catalog change costs a serving worker's search state: the CPU a node spends after another process adds
(or withdraws) one book, until its gallery table and the spelling vocabulary of the default text model are current.

A SQLite catalog of ``--illustrations`` illustrations (~13 a book, descriptions of ~30 words drawn Zipf-like from
pyspellchecker's 30,000 commonest English words, each with one invented name; a 64-bit pHash each, one in ten a few
bits from an earlier one, so that near-duplicate groups exist and move) is written once into DATA_DIR and
reused. One engine reads it whole (table and vocabulary: the reference, what every change cost before), then for
each of ``--changes`` changes (a new book, or a book withdrawn) another connection writes it, and the engine's next
snapshot and vocabulary are timed in CPU (the process's, threads included: the work runs in worker threads).

    nice .venv/bin/python benchmarks/catalog_change.py DATA_DIR [--illustrations 200000] [--changes 20] [--seed 1]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from imagesvc.catalog import Catalog, illustration_id, page_id
from imagesvc.catalog import writes as w
from imagesvc.search.engine import SearchEngine
from imagesvc.settings import load_settings

PER_BOOK = 13
TYPES = ("emblem", "diagram", "plant", "portrait", "apparatus", "map", "ornament", "woodcut")


class Descriptions:
    """Seeded descriptions: common English words, Zipf-skewed, with one invented name each."""

    def __init__(self, seed: int) -> None:
        from spellchecker import SpellChecker

        counts = SpellChecker(language="en", distance=1).word_frequency.items()
        self.words = [word for word, _ in sorted(counts, key=lambda c: -c[1])[:30_000] if word.isalpha()]
        self.weights = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(self.words))))
        self.rng = random.Random(seed)
        self.hashes: list[int] = []

    def name(self) -> str:
        return "".join(self.rng.choices("abcdefghijklmnopqrstuvwxyz", k=self.rng.randint(5, 10)))

    def phash(self) -> str:
        """A 64-bit perceptual hash; one in ten a few bits from an earlier one (a near duplicate: a group)."""
        if self.hashes and self.rng.random() < 0.1:
            value = self.rng.choice(self.hashes)
            for bit in self.rng.sample(range(64), self.rng.randint(1, 4)):
                value ^= 1 << bit
        else:
            value = self.rng.getrandbits(64)
        self.hashes.append(value)
        return f"{value:016x}"

    def text(self, words: int) -> str:
        drawn = self.rng.choices(self.words, cum_weights=self.weights, k=words)
        drawn[self.rng.randrange(words)] = self.name()
        return " ".join(drawn).capitalize() + "."


def book_rows(n: int, made: Descriptions, count: int = PER_BOOK) -> tuple[dict[str, Any], list[w.PageRows]]:
    book_id = f"{n:016x}"
    book = {
        "id": book_id,
        "slug": f"change-{n}",
        "title": f"Book {n}",
        "author": "Anon",
        "language": "Latin",
        "year": 1450 + n % 350,
        "attribution": {"institution": "Library", "item_url": f"https://example.org/{n}"},
    }
    rows: list[w.PageRows] = []
    for number in range(1, count + 1):
        page = {
            "id": page_id(book_id, number),
            "book_id": book_id,
            "number": number,
            "ocr": "",
            "translation": None,
            "original": None,
            "image_unavailable": 1,
            "unavailable_reason": "generated: no image",
            "master_key": None,
            "master_sha256": None,
            "master_format": None,
            "derivation": None,
            "width": 1600,
            "height": 2400,
        }
        subjects = [made.rng.choice(made.words[:3000]) for _ in range(2)]
        illustration = {
            "id": illustration_id(book_id, number, 0),
            "index": 0,
            "bbox": {"x": 0.1, "y": 0.1, "width": 0.5, "height": 0.4},
            "type": made.rng.choice(TYPES),
            "description": made.text(made.rng.randint(15, 45)),
            "museum_description": made.text(20) if made.rng.random() < 0.2 else None,
            "subjects": subjects,
            "symbols": [made.name()] if made.rng.random() < 0.3 else [],
            "phash": made.phash(),
        }
        rows.append((page, {}, [illustration]))
    return book, rows


def write_book(catalog: Catalog, n: int, made: Descriptions) -> None:
    book, rows = book_rows(n, made)
    with catalog.transaction() as conn:
        w.upsert_book(conn, book, "generated")
        w.upsert_pages(conn, rows)


def generate(path: Path, illustrations: int, seed: int) -> Catalog:
    catalog = Catalog(path)
    books = illustrations // PER_BOOK
    have = int(catalog.scalar("SELECT count(*) FROM books") or 0)
    if have < books:
        made = Descriptions(seed)
        started = time.monotonic()
        for n in range(books):
            if n < have:  # the same words for the books already written (seeded in order)
                book_rows(n, made)
                continue
            write_book(catalog, n, made)
            if n % 1000 == 0:
                print(f"book {n}/{books}, {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    missing = catalog.tuples("SELECT id FROM illustrations WHERE phash IS NULL ORDER BY id")
    if missing:  # a catalog written before the benchmark gave every illustration a pHash, as a real library has
        made = Descriptions(seed + 2)
        with catalog.transaction() as conn:
            conn.executemany("UPDATE illustrations SET phash = ? WHERE id = ?", [(made.phash(), r[0]) for r in missing])
    return catalog


async def measure(data_dir: Path, illustrations: int, changes: int, seed: int) -> None:
    catalog = generate(data_dir / "catalog.sqlite3", illustrations, seed)
    writer = Catalog(data_dir / "catalog.sqlite3")
    settings = load_settings({}, data_dir=data_dir / "node", session_secret="bench", text_model="e5")
    engine = SearchEngine(settings, catalog)
    assert engine.text_model is not None  # the default text model is on (its vocabulary is what is measured)

    spent: list[float] = []  # CPU of the vocabulary's own work, in the worker threads that do it

    def timed(work: Any) -> Any:
        def run(*args: Any) -> Any:
            started = time.thread_time()
            try:
                return work(*args)
            finally:
                spent.append(time.thread_time() - started)

        return run

    engine._vocabulary = timed(engine._vocabulary)  # type: ignore[method-assign]
    if hasattr(engine, "_follow_books"):  # before: every change read the vocabulary whole
        engine._follow_books = timed(engine._follow_books)  # type: ignore[method-assign]

    passages: list[str] = []  # a dense index's ids: three passages an illustration, as the default model embeds
    dense_ms: list[float] = []

    async def current() -> tuple[float, float]:
        """CPU ms of the whole change (the process's, every thread), and of the vocabulary's part of it; and, apart,
        of the first text query's mapping of the dense index's passages to the new table's rows."""
        spent.clear()
        cpu = time.process_time()
        snap = await engine.snapshot()
        await snap.derive("vocabulary", engine._vocabulary)
        total = (time.process_time() - cpu) * 1000
        words = sum(spent) * 1000
        if not passages:
            passages.extend(iid for iid in snap.table.ids for _ in range(3))
        cpu = time.process_time()
        engine._dense_rows(snap.table, passages)
        dense_ms.append((time.process_time() - cpu) * 1000)
        return total - words, words

    table, vocabulary = await current()
    count = len(engine.current.table)  # type: ignore[union-attr]
    print(f"{count} illustrations; read whole: table {table:.0f} ms CPU, vocabulary {vocabulary:.0f} ms CPU")
    print(f"dense rows of {len(passages)} passages, first mapping: {dense_ms[0]:.0f} ms CPU")
    made = Descriptions(seed + 1)
    base = int(catalog.scalar("SELECT count(*) FROM books") or 0) + 10_000_000
    added: list[tuple[float, float]] = []
    withdrawn: list[tuple[float, float]] = []
    for k in range(changes):
        write_book(writer, base + k, made)
        added.append(await current())
        if k % 2:
            with writer.transaction() as conn:
                w.withdraw_book(conn, f"{base + k - 1:016x}")
            withdrawn.append(await current())
    for name, runs in (("new book", added), ("book withdrawn", withdrawn)):
        tables, words = [t for t, _ in runs], [v for _, v in runs]  # the rest (the gallery table's update), vocabulary
        totals = [t + v for t, v in runs]
        print(
            f"{name}: {len(runs)} changes; CPU ms per change, median (max): table and the rest "
            f"{statistics.median(tables):.1f} "
            f"({max(tables):.1f}), vocabulary {statistics.median(words):.1f} ({max(words):.1f}), "
            f"together {statistics.median(totals):.1f} ({max(totals):.1f})"
        )
    after = dense_ms[1:]
    print(
        f"dense rows after a change: CPU ms, median (max) {statistics.median(after):.1f} ({max(after):.1f}) "
        "(the first text query's, not in the figures above)"
    )
    status = engine.status()["gallery_table"]
    print(f"engine: {status}")
    engine.close()
    catalog.close()
    writer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--illustrations", type=int, default=200_000)
    parser.add_argument("--changes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    args.data_dir.mkdir(parents=True, exist_ok=True)
    asyncio.run(measure(args.data_dir, args.illustrations, args.changes, args.seed))


if __name__ == "__main__":
    main()
