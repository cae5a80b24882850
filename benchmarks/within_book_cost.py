"""The cost of a search inside a book (``search_within_book``'s catalog work) on a generated catalog: CPU seconds of
hostile queries on a 1,500-page book, and one quoted phrase's latency on SQLite and PostgreSQL.

    .venv/bin/python benchmarks/within_book_cost.py [--books 40] [--samples 40] [--seed 1] [--backend both]
        [--code DIR]

It writes, with ``benchmarks/catalog_generate.make_book`` (seeded: the same arguments write the same text), one
German book of 1,500 pages and ``--books`` books of 300 pages into a fresh SQLite file and, with ``--backend both``
or ``postgres``, a fresh PostgreSQL cluster (``benchmarks/catalog_postgres``), then measures in this process:

- **hostile queries on the 1,500-page book**: CPU seconds (``time.process_time``) of one word, one quoted phrase,
  32 repeats of it, 32 repeats of a hyphenated pair, 32 distinct hyphenated pairs, and a phrase of common words that
  no page holds, with the pages found and, where the code has it, the work units counted (``SearchWork``);
- **one quoted phrase** (two common words of the book's language) in ``--samples`` books drawn by the seed, three
  times each: p50 / p95 of the search and of the tool's snippet work for the first 20 hits, in ms (wall, and this
  process's CPU, which a loaded machine does not inflate).

With ``--flood SECONDS`` it then starts ``imagesvc serve`` (one worker) on the SQLite catalog and asks ``/health``
every 50 ms (as a user-directed assistant fetch, which no limit applies to) for SECONDS while idle, then while 12
anonymous searches of the 32 distinct pairs arrive at once from one address (within its 60 requests an hour) and 4
senders with one free key send them again as soon as each is answered; it prints ``/health`` p50 / p99 / max, the
answers' statuses and the server's CPU seconds.

``--code DIR`` measures another checkout's ``imagesvc`` (e.g. the main branch, for the figures before a change).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BIG = 5  # book number of the 1,500-page book: German with the seed of 1
PHRASES = {"German": "und der", "Latin": "et in", "French": "et la", "Italian": "e il", "Hebrew": "של את",
           "Arabic": "في من", "Chinese": "之"}  # fmt: skip


def _hostile(phrase: str) -> dict[str, str]:
    pairs = ["und-der", "der-und", "die-der", "der-die", "das-und", "und-die", "in-der", "von-der", "der-in", "zu-der",
             "mit-der", "und-in", "of-the", "the-of", "and-the", "the-and", "to-the", "in-the", "the-to", "a-the",
             "is-the", "it-the", "the-in", "and-of", "of-and", "to-of", "be-the", "in-of", "which-the", "the-is",
             "with-the", "the-a"]  # fmt: skip
    return {
        "one word": phrase.split()[0],
        "one quoted phrase": f'"{phrase}"',
        "32 x the quoted phrase": " ".join([f'"{phrase}"'] * 32),
        "32 x a hyphenated pair": " ".join([phrase.replace(" ", "-")] * 32),
        "32 distinct hyphenated pairs": " ".join(pairs),
        "a phrase no page holds": '"der der und und der"',
    }


def _write(catalog: Any, jobs: list[tuple[int, int, int, int]]) -> None:
    from benchmarks.catalog_generate import make_book
    from imagesvc.catalog import writes as w

    for job in jobs:
        book, rows = make_book(job)
        with catalog.transaction() as conn:
            w.upsert_book(conn, book, f"generated:{job[3]}")
            w.upsert_pages(conn, rows)


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(p * len(ordered) + 0.999999) - 1))]


def _measure(name: str, catalog: Any, books: list[tuple[str, str]], samples: int, seed: int) -> None:
    from imagesvc.catalog.text_fold import query_words
    from imagesvc.surface.snippets import snippet

    fields = ["ocr", "translation", "original"]
    has_work = "work" in inspect.signature(catalog.search_pages).parameters
    big = f"{BIG:016x}"
    print(f"\n{name}: 1,500-page book, CPU seconds (one run each)")
    print(f"{'query':<30} {'cpu s':>7} {'wall s':>7} {'pages':>6} {'work units':>11}")
    for label, q in _hostile(PHRASES["German"]).items():
        extra: dict[str, Any] = {}
        if has_work:
            from imagesvc.catalog.page_rank import SearchWork

            extra["work"] = SearchWork(limit=None)
        cpu, wall = time.process_time(), time.perf_counter()
        _, total = catalog.search_pages(big, query_words(q), fields, limit=20, offset=0, **extra)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        units = f"{extra['work'].spent:,}" if extra else "-"
        print(f"{label:<30} {cpu:>7.3f} {wall:>7.3f} {total:>6} {units:>11}")
    rng = random.Random(seed)
    drawn = [rng.choice(books) for _ in range(samples)]
    search_ms, tool_ms, cpu_ms = [], [], []
    for _ in range(3):
        for book_id, language in drawn:
            words = query_words(f'"{PHRASES[language]}"')
            c0 = time.process_time()
            t0 = time.perf_counter()
            found, _ = catalog.search_pages(book_id, words, fields, limit=20, offset=0)
            t1 = time.perf_counter()
            pages = catalog.pages_numbered(book_id, [number for number, _, _ in found])
            for number, _, texts in found:
                for text in texts:
                    snippet(pages[number][text] or "", words)
            t2 = time.perf_counter()
            cpu_ms.append((time.process_time() - c0) * 1000)
            search_ms.append((t1 - t0) * 1000)
            tool_ms.append((t2 - t0) * 1000)
    print(f"{name}: one quoted phrase in {samples} books x 3, p50 / p95 ms")
    print(f"  search {statistics.median(search_ms):.1f} / {_pct(search_ms, 0.95):.1f};"
          f" with the snippets of 20 hits {statistics.median(tool_ms):.1f} / {_pct(tool_ms, 0.95):.1f};"
          f" CPU of this process {statistics.median(cpu_ms):.1f} / {_pct(cpu_ms, 0.95):.1f}")  # fmt: skip


ASSISTANT = {"User-Agent": "Mozilla/5.0 (compatible; Claude-User/1.0)"}  # the probe: never limited


def _server_cpu(pid: int) -> float:
    """CPU seconds (user and system) of ``pid`` and every process below it."""
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        with contextlib.suppress(OSError):  # the process ended meanwhile
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            for task in Path(f"/proc/{p}/task").glob("*/children"):
                todo.extend(int(c) for c in task.read_text().split())
    return total


async def _phase(url: str, search: str, q: str, key: str | None, seconds: float) -> tuple[list[float], dict[str, int]]:
    """Milliseconds of each ``/health`` probe, and the searches' statuses: a flood when ``key`` is given."""
    import aiohttp

    stop = time.monotonic() + seconds
    statuses: dict[str, int] = {}
    times: list[float] = []
    timeout = aiohttp.ClientTimeout(total=300)

    async def probe() -> None:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while time.monotonic() < stop:
                t0 = time.perf_counter()
                async with session.get(f"{url}/health", headers=ASSISTANT) as r:
                    await r.read()
                times.append((time.perf_counter() - t0) * 1000)
                await asyncio.sleep(0.05)

    async def send(headers: dict[str, str], again: bool, who: str) -> None:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                async with session.get(search, params={"q": q}, headers=headers) as r:
                    await r.read()
                    statuses[f"{who} {r.status}"] = statuses.get(f"{who} {r.status}", 0) + 1
                if not again or time.monotonic() >= stop:
                    return

    senders = []
    if key is not None:
        senders = [send({}, False, "anonymous") for _ in range(12)]
        senders += [send({"Authorization": f"Bearer {key}"}, True, "key") for _ in range(4)]
    await asyncio.gather(probe(), *senders)
    return times, statuses


async def _flood(data_dir: Path, code: Path, seconds: float) -> None:
    from tests.servers import free_port, wait_healthy

    imagesvc = str(Path(sys.executable).parent / "imagesvc")
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGESVC_")} | {
        "PYTHONPATH": str(code),
        "IMAGESVC_DATA_DIR": str(data_dir),
        "IMAGESVC_SITE_URL": "https://library.example",
        "IMAGESVC_LOG_LEVEL": "warning",
        "IMAGESVC_ASSISTANT_NETWORKS": "127.0.0.0/8",
        "IMAGESVC_SERVE_WORKERS": "1",
        "IMAGESVC_TEXT_MODEL": "off",
    }
    made = subprocess.run([imagesvc, "keys", "create", "--tier", "free", "--json"], env=env, capture_output=True,
                          text=True, check=True)  # fmt: skip
    key = json.loads(made.stdout)["key"]
    port = free_port()
    log = data_dir / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([imagesvc, "serve"], env=env | {"IMAGESVC_PORT": str(port)}, stdout=out, stderr=out)
    url = f"http://127.0.0.1:{port}"
    search = f"{url}/api/books/{BIG:016x}/search"
    q = _hostile(PHRASES["German"])["32 distinct hyphenated pairs"]
    try:
        wait_healthy(url, proc, log, timeout=120)
        print(f"\nflood on imagesvc serve (one worker, SQLite): /health p50 / p99 / max ms over {seconds:.0f} s")
        for phase in ("idle", "flood"):
            cpu = _server_cpu(proc.pid)
            times, statuses = await _phase(url, search, q, key if phase == "flood" else None, seconds)
            answers = ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items())) or "-"
            print(f"  {phase:<5} {statistics.median(times):.1f} / {_pct(times, 0.99):.1f} / {max(times):.1f};"
                  f" server CPU {_server_cpu(proc.pid) - cpu:.1f} s; {answers}")  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--books", type=int, default=40, help="books of 300 pages beside the 1,500-page one")
    parser.add_argument("--samples", type=int, default=40, help="books drawn for the quoted phrase's latency")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--code", type=Path, default=REPO, help="checkout whose imagesvc is measured")
    parser.add_argument("--flood", type=float, default=0, help="seconds of each flood phase (0: none)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(args.code.resolve()))
    import imagesvc
    from imagesvc.catalog import Catalog

    print(f"imagesvc from {Path(imagesvc.__file__).parent}; seed {args.seed}")
    jobs = [(BIG, 1500, 20, args.seed)] + [(n, 300, 13, args.seed) for n in range(100, 100 + args.books)]
    with tempfile.TemporaryDirectory(prefix="within-cost-") as tmp:
        Path(tmp).chmod(0o755)  # PostgreSQL runs as nobody when this runs as root
        backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
        for backend in backends:
            t0 = time.monotonic()
            stop = None
            if backend == "sqlite":
                catalog: Any = Catalog(Path(tmp) / "catalog.sqlite3")
            else:
                from benchmarks.catalog_postgres import persistent_postgres
                from imagesvc.catalog.postgres import PostgresCatalog

                server = persistent_postgres(Path(tmp) / "pg")
                stop = server.stop
                catalog = PostgresCatalog(server.url, pool_size=2)
            try:
                _write(catalog, jobs)
                rows = catalog.query_all("SELECT id, language FROM books ORDER BY id")
                pages = catalog.scalar("SELECT count(*) FROM pages")
                print(f"\n{backend}: {len(rows)} books, {pages:,} pages written in {time.monotonic() - t0:.0f} s")
                _measure(backend, catalog, [(r["id"], r["language"]) for r in rows], args.samples, args.seed)
            finally:
                catalog.close()
                if stop is not None:
                    stop()
        if args.flood and "sqlite" in backends:
            asyncio.run(_flood(Path(tmp), args.code.resolve(), args.flood))


if __name__ == "__main__":
    main()
