"""The catalog at size, on SQLite and PostgreSQL in one run: database size, a node's start-up time and memory, read
and search latencies, and how long a revoked key and a new book take to reach a second node; with each figure's
growth between two sizes and its extrapolation to the library's 4.5 million pages.

Each DATA_DIR is a catalog written by ``catalog_generate.py``: SQLite (``DATA_DIR/catalog.sqlite3``) or PostgreSQL
(``DATA_DIR/pg``, the cluster the generator made; started here and stopped after). For each: the catalog's size on
disk; ``imagesvc serve --workers 1`` started on it, timed to its first ``/health`` answer and to its first gallery
search answer, and its resident memory (the node's process tree; PostgreSQL's own server is not the node's); then
p50/p95 over HTTP, one request at a time with an uncapped key, of ``get_book``, ``get_quote``, ``get_book_text``
(50 pages), ``list_books`` with a search, the gallery search and ``search_within_book`` (words of each book's own
language, common and rare), on random books. Then a second node starts on the same catalog (on SQLite: the same
file, i.e. a second process on the same host; nodes on other hosts follow snapshots, measured in issue 24) and:

- a key is revoked through the catalog (what ``imagesvc keys revoke`` does): the time from its commit until both
  nodes refuse it;
- a book is committed through ``catalog.writes`` (what ingest commits: one transaction with the book, its pages
  and an illustration with a unique word): the time until both nodes answer ``get_book`` for it, and until both
  nodes' gallery search finds its illustration (the search state follows the catalog).

The text model is off (dense text vectors are computed once by ``imagesvc index`` and are not part of a node's
start here).

    .venv/bin/python benchmarks/catalog_scale.py DATA_DIR [DATA_DIR ...] [--samples 200] [--json OUT]
        [--compare EARLIER.json ...]

``--gallery`` measures the gallery alone, at more samples for the same time: the reference request, gallery search
in a mix of keyword queries, filters (type, year range) and paging, each kind also on a row of its own, two-word
queries never asked before in the run (what no node has kept the matches of), and the unranked listing with a
filter; then how long a new book takes to appear in both nodes' gallery search and a
withdrawn book to leave it (the key figures are left out).

``--json`` writes the figures; ``--compare`` adds the figures of earlier runs (other sizes) to the table, so growth
can be read between sizes measured at different times. Latencies on a shared 2-core host are noisy: the reference
row (a request that reads no catalog) shows the host's own noise in each run.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.catalog_generate import ENGLISH as GENERATED_WORDS
from benchmarks.catalog_generate import make_book
from benchmarks.catalog_postgres import database_bytes, persistent_postgres
from imagesvc.catalog import Catalog
from imagesvc.catalog import writes as w
from imagesvc.catalog.api_keys import create_key, revoke_key

IMAGESVC = str(Path(sys.executable).with_name("imagesvc"))
LIBRARY_PAGES = 4_500_000
TARGETS = {"start_s": 30.0, "rss_mb": 2048.0, "read_ms": 20.0, "search_ms": 100.0}
WORDS = {  # a common and a rarer word of each language the generator writes
    "Latin": ["aurum", "lapis", "nigredo"],
    "German": ["gold", "wurtzel", "quecksilber"],
    "French": ["feu", "fourneau", "estain"],
    "Italian": ["oro", "fornace", "zolfo"],
    "Hebrew": ["הירח", "המולד", "בראשית"],
    "Arabic": ["الكيمياء", "كتاب", "زئبق"],
    "Chinese": ["金", "黃金", "朱砂"],
}
ENGLISH = ["gold", "furnace", "alembic", "philosophers stone", "tincture"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss_mb(root: int) -> float:
    """Resident memory of ``root`` and every descendant, in MB, from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                parents[int(entry.name)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, grew = {root}, True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in tree and pid not in tree:
                tree.add(pid)
                grew = True
    total = 0
    for pid in tree:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def _size_gb(catalog: Catalog) -> float:
    """The catalog's size in GB: SQLite's pages in use (free pages left by a rebuilt index are not counted), or the
    PostgreSQL database's size on disk."""
    if catalog.dialect == "postgres":
        return database_bytes(catalog) / 1e9
    pages = catalog.scalar("PRAGMA page_count")
    free = catalog.scalar("PRAGMA freelist_count")
    return (pages - free) * catalog.scalar("PRAGMA page_size") / 1e9


def _sample(catalog: Catalog, n: int, seed: int) -> tuple[list[dict[str, Any]], int, str]:
    """Random live books (id, language), the catalog's page count, and an uncapped key."""
    pages = catalog.scalar("SELECT count(*) FROM pages")
    books = catalog.query_all("SELECT id, language FROM books WHERE withdrawn = 0 AND slug LIKE 'gen-%'")
    key, _ = create_key(catalog, "enterprise", "catalog_scale benchmark")
    rng = random.Random(seed)
    return [rng.choice(books) for _ in range(n)], pages, key


@contextmanager
def opened(data_dir: Path) -> Iterator[tuple[str, Catalog, Callable[[], dict[str, str]]]]:
    """The catalog in ``data_dir`` (its PostgreSQL started): its backend's name, the catalog, and a function
    giving a new node's settings (on PostgreSQL each node has a data dir of its own and no catalog copy)."""
    if not (data_dir / "pg" / "pgdata").exists():
        catalog = Catalog(data_dir / "catalog.sqlite3")
        try:
            yield "sqlite", catalog, lambda: {"IMAGESVC_DATA_DIR": str(data_dir)}
        finally:
            catalog.close()
        return
    from imagesvc.catalog.postgres import PostgresCatalog

    server = persistent_postgres(data_dir / "pg")
    catalog = PostgresCatalog(server.url, pool_size=2)
    with tempfile.TemporaryDirectory(prefix="catalog-scale-nodes-") as nodes:

        def node() -> dict[str, str]:
            return {
                "IMAGESVC_DATA_DIR": tempfile.mkdtemp(dir=nodes),
                "IMAGESVC_CATALOG": "postgres",
                "IMAGESVC_DATABASE_URL": server.url,
            }

        try:
            yield "postgres", catalog, node
        finally:
            catalog.close()
            server.stop()


TYPES = ("emblem", "diagram", "plant", "portrait", "apparatus", "map", "ornament")  # catalog_generate's


def _gallery_calls(rng: random.Random) -> dict[str, Callable[[dict[str, Any]], tuple[str, dict[str, str]]]]:
    """The gallery query mix: keyword queries alone, with a filter, deeper pages, and the filtered listing."""

    def year() -> dict[str, str]:
        start = rng.randrange(1450, 1750)
        return {"year_from": str(start), "year_to": str(start + 50)}

    # Two words of the illustrations' vocabulary, a pair not asked before in the run: no node has its matches yet
    # (a node keeps the matches of recent queries until the catalog changes: the rows above repeat five queries).
    pairs = [f"{a} {b}" for a, b in itertools.permutations(GENERATED_WORDS[20:], 2)]
    rng.shuffle(pairs)
    fresh = iter(pairs)

    return {
        "gallery: keyword never asked before": lambda b: ("/api/gallery", {"q": next(fresh)}),
        "gallery: keyword": lambda b: ("/api/gallery", {"q": rng.choice(ENGLISH)}),
        "gallery: keyword + type": lambda b: ("/api/gallery", {"q": rng.choice(ENGLISH), "type": rng.choice(TYPES)}),
        "gallery: keyword + years": lambda b: ("/api/gallery", {"q": rng.choice(ENGLISH), **year()}),
        "gallery: keyword, page 2-5": lambda b: (
            "/api/gallery",
            {"q": rng.choice(ENGLISH), "offset": str(20 * rng.randint(1, 4))},
        ),
        "gallery: listing + type, page 1-5": lambda b: (
            "/api/gallery",
            {"type": rng.choice(TYPES), "offset": str(20 * rng.randint(0, 4))},
        ),
    }


def _percentiles(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return ordered[len(ordered) // 2] * 1000, ordered[min(len(ordered) - 1, math.ceil(len(ordered) * 0.95) - 1)] * 1000


async def _latencies(
    base: str, key: str, books: list[dict[str, Any]], pages_per_book: int, gallery: bool = False
) -> dict[str, Any]:
    rng = random.Random(7)
    calls: dict[str, Callable[[dict[str, Any]], tuple[str, dict[str, str]]]] = {
        "reference: rate_limit": lambda b: ("/api/rate_limit", {}),  # no catalog read: the host's own noise
        "/health (counts kept between probes)": lambda b: ("/health", {}),
        "get_book": lambda b: (f"/api/books/{b['id']}", {}),
        "get_quote": lambda b: (f"/api/books/{b['id']}/quote", {"page": str(rng.randint(1, pages_per_book))}),
        "get_book_text (50 pages)": lambda b: (
            f"/api/books/{b['id']}/text",
            {"from": str(f := rng.randint(1, pages_per_book - 49)), "to": str(f + 49)},
        ),
        "list_books search": lambda b: ("/api/books/library", {"search": rng.choice([b["language"], "treatise"])}),
        "gallery search": lambda b: ("/api/gallery", {"q": rng.choice(ENGLISH)}),
        "search_within_book": lambda b: (
            f"/api/books/{b['id']}/search",
            {"q": rng.choice(WORDS.get(b["language"], []) + ENGLISH)},
        ),
    }
    if gallery:
        calls = {"reference: rate_limit": calls["reference: rate_limit"], **_gallery_calls(rng)}
    out: dict[str, Any] = {name: [] for name in calls}
    failed: dict[str, str] = {}
    errors: dict[str, int] = {}
    headers = {"Authorization": f"Bearer {key}"}
    async with aiohttp.ClientSession(base, headers=headers) as http:
        for name, make in calls.items():  # one warm-up each; a call this catalog cannot answer is left out
            path, params = make(books[0])
            async with http.get(path, params=params) as resp:
                await resp.read()
                if resp.status != 200:
                    failed[name] = f"{resp.status} {(await resp.text())[:200]}"
        for name in failed:
            print(f"left out {name}: {failed[name]}", file=sys.stderr)
            del calls[name]
        for book in books:  # in turns: a load swing on the host falls on every row alike
            for name, make in calls.items():
                path, params = make(book)
                start = time.perf_counter()
                async with http.get(path, params=params) as resp:
                    await resp.read()
                    if resp.status != 200 and not gallery:
                        raise RuntimeError(f"{name} {path} {params}: {resp.status} {await resp.text()}")
                    if resp.status != 200:  # counted, and timed: a 503 after the statement timeout is a slow answer
                        errors[name] = errors.get(name, 0) + 1
                out[name].append(time.perf_counter() - start)
    if gallery:
        out["gallery search (the whole mix)"] = [t for name in out if name.startswith("gallery: ") for t in out[name]]
    for name, count in errors.items():
        print(f"{name}: {count} of {len(out[name])} answers were not 200", file=sys.stderr)
    found = {name: _percentiles(times) if times else (math.nan, math.nan) for name, times in out.items()}
    return {**found, **({"answers not 200": (sum(errors.values()), math.nan)} if gallery else {})}


def _serve(node: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        **node,
        "IMAGESVC_PORT": str(port),
        "IMAGESVC_TEXT_MODEL": "off",
        "IMAGESVC_LOG_LEVEL": "warning",
        "IMAGESVC_SESSION_SECRET": "benchmark",
    }
    return subprocess.Popen([IMAGESVC, "serve", "--workers", "1"], env=env, stdout=subprocess.DEVNULL)


async def _wait(url: str, deadline: float) -> float:
    started = time.monotonic()
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            try:
                async with http.get(url) as resp:
                    if resp.status == 200:
                        return time.monotonic() - started
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise TimeoutError(url)


async def _start(node: dict[str, str]) -> tuple[subprocess.Popen[bytes], str, float, float]:
    """A node on the catalog: its process, base URL, and seconds to its first ``/health`` and gallery answers."""
    port = _free_port()
    started = time.monotonic()
    proc = _serve(node, port)
    base = f"http://127.0.0.1:{port}"
    try:
        await _wait(f"{base}/health", started + 600)
        health = time.monotonic() - started
        await _wait(f"{base}/api/gallery?q=gold", started + 600)
    except BaseException:
        _stop(proc)
        raise
    return proc, base, health, time.monotonic() - started


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def _until(bases: list[str], check: Callable[[aiohttp.ClientSession, str], Any], timeout: float = 120) -> float:
    """Seconds until ``check(http, base)`` holds on every node (polled every 10 ms, the nodes at once)."""
    started = time.perf_counter()

    async def one(http: aiohttp.ClientSession, base: str) -> float:
        while time.perf_counter() - started < timeout:
            if await check(http, base):
                return time.perf_counter() - started
            await asyncio.sleep(0.01)
        raise TimeoutError(f"{base}: not seen within {timeout} s")

    async with aiohttp.ClientSession() as http:
        return max(await asyncio.gather(*(one(http, base) for base in bases)))


async def _propagation(
    catalog: Catalog, bases: list[str], key: str, repeats: int, gallery: bool = False
) -> dict[str, list[float]]:
    """Seconds from a commit (a revoked key, a new book, a withdrawal) until every node in ``bases`` shows it."""
    out: dict[str, list[float]] = {"new book: get_book": [], "new book: gallery": []}
    if gallery:
        out["withdrawn book: gone from gallery"] = []
    else:
        out["revoked key refused"] = []
    ours = {"Authorization": f"Bearer {key}"}
    for _ in range(0 if gallery else repeats):
        fresh, record = create_key(catalog, "enterprise", "catalog_scale revoke")
        theirs = {"Authorization": f"Bearer {fresh}"}

        async def refused(http: aiohttp.ClientSession, base: str, theirs: dict[str, str] = theirs) -> bool:
            async with http.get(f"{base}/api/rate_limit", headers=theirs) as resp:
                return resp.status == 401

        if await _until(bases, lambda http, base: _not(refused(http, base))) > 5:
            raise RuntimeError("a new key was not accepted")
        revoke_key(catalog, record.id)
        out["revoked key refused"].append(await _until(bases, refused))
    for _ in range(repeats):
        n = random.randrange(10_000_000, 100_000_000)
        book, rows = make_book((n, 300, 3, 1))
        word = f"zq{n}"
        for _page, _renditions, illustrations in rows:
            for ill in illustrations:
                ill["description"] = f"A {word} beside a furnace."
        with catalog.transaction() as conn:  # what ingest commits for a book
            w.upsert_book(conn, book, "catalog_scale")
            w.upsert_pages(conn, rows)
        committed = time.perf_counter()

        async def has_book(http: aiohttp.ClientSession, base: str, book_id: str = book["id"]) -> bool:
            async with http.get(f"{base}/api/books/{book_id}", headers=ours) as resp:
                return resp.status == 200

        async def in_gallery(http: aiohttp.ClientSession, base: str, word: str = word) -> bool:
            async with http.get(f"{base}/api/gallery", params={"q": word}, headers=ours) as resp:
                return resp.status == 200 and bool((await resp.json())["items"])

        await _until(bases, has_book)
        out["new book: get_book"].append(time.perf_counter() - committed)
        await _until(bases, in_gallery)
        out["new book: gallery"].append(time.perf_counter() - committed)
        if gallery:
            with catalog.transaction() as conn:
                w.withdraw_book(conn, book["id"])
            withdrawn = time.perf_counter()
            await _until(bases, lambda http, base, word=word: _not(in_gallery(http, base, word)))
            out["withdrawn book: gone from gallery"].append(time.perf_counter() - withdrawn)
    return out


async def _not(answer: Any) -> bool:
    return not await answer


async def measure(data_dir: Path, samples: int, repeats: int, gallery: bool = False) -> dict[str, Any]:
    with opened(data_dir) as (backend, catalog, node):
        books, pages, key = _sample(catalog, samples, seed=11)
        size = _size_gb(catalog)
        counted = time.perf_counter()
        if not gallery:
            catalog.counts()  # what /health reads when the catalog has changed since its last probe
        counts_ms = (time.perf_counter() - counted) * 1000
        proc, base, health, first_search = await _start(node())
        try:
            rss_started = _rss_mb(proc.pid)
            latencies = await _latencies(base, key, books, 300, gallery)
            rss_after = _rss_mb(proc.pid)
            second, second_base, _, second_search = await _start(node())
            try:
                spread = await _propagation(catalog, [base, second_base], key, repeats, gallery)
            finally:
                _stop(second)
        finally:
            _stop(proc)
    return {
        "backend": backend,
        "pages": pages,
        "size_gb": size,
        "counts, uncached (ms)": counts_ms,
        "start_health_s": health,
        "start_search_s": first_search,
        "second_node_start_search_s": second_search,
        "rss_start_mb": rss_started,
        "rss_after_mb": rss_after,
        **{f"{name} p50": v[0] for name, v in latencies.items()},
        **{f"{name} p95": v[1] for name, v in latencies.items()},
        **{f"{name} median ms": sorted(v)[len(v) // 2] * 1000 for name, v in spread.items()},
        **{f"{name} max ms": max(v) * 1000 for name, v in spread.items()},
    }


def _extrapolate(a: dict[str, Any], b: dict[str, Any], name: str) -> tuple[float, float]:
    """(growth exponent between the sizes, value at 4.5 M pages by that power law; growth clamped to 0..1.5)."""
    ratio = b["pages"] / a["pages"]
    if a[name] <= 0 or b[name] <= 0 or ratio <= 1:
        return float("nan"), b[name]
    k = max(0.0, min(1.5, math.log(b[name] / a[name]) / math.log(ratio)))
    return k, b[name] * (LIBRARY_PAGES / b["pages"]) ** k


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data_dirs", type=Path, nargs="+")
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5, help="revoked keys and new books timed on each backend")
    parser.add_argument("--gallery", action="store_true", help="the gallery alone: its query mix and propagation")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--compare", type=Path, nargs="*", default=[], help="figures of earlier runs to show")
    args = parser.parse_args()
    runs = [asyncio.run(measure(d, args.samples, args.repeats, args.gallery)) for d in args.data_dirs]
    print(f"load average after the runs: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))
    runs = [run for path in args.compare for run in json.loads(path.read_text())] + runs
    runs.sort(key=lambda r: (r["backend"], r["pages"]))
    names = [name for name in runs[-1] if name not in ("backend", "pages")]
    print(f"{'figure':40}" + "".join(f"{r['backend'] + ' ' + format(r['pages'], ','):>20}" for r in runs))
    for name in names:
        print(f"{name:40}" + "".join(f"{r.get(name, math.nan):>20.2f}" for r in runs))
    for backend in sorted({r["backend"] for r in runs}):
        sized = [r for r in runs if r["backend"] == backend]
        if len(sized) < 2 or sized[0]["pages"] == sized[-1]["pages"]:
            continue
        print(f"\n{backend}: growth k between {sized[0]['pages']:,} and {sized[-1]['pages']:,} pages "
              f"(figure ~ pages^k), and the figure at 4.5 M pages by that power law")  # fmt: skip
        for name in names:
            if name in sized[0]:
                k, at = _extrapolate(sized[0], sized[-1], name)
                print(f"{name:40}{k:>10.2f}{at:>16.2f}")
    print(f"targets at 4.5 M pages: start <= {TARGETS['start_s']} s, RSS <= {TARGETS['rss_mb']:.0f} MB, "
          f"reads by id p95 <= {TARGETS['read_ms']} ms, searches p95 <= {TARGETS['search_ms']} ms, "
          "revoked key <= 1 s, new book <= 5 s")  # fmt: skip


if __name__ == "__main__":
    main()
