"""The catalog at size: database size, a node's start-up time and memory, and read and search latencies, on catalogs
written by ``catalog_generate.py``, with each figure's growth between two sizes and its extrapolation to the
library's 4.5 million pages.

For each data dir: the catalog's size on disk; ``imagesvc serve --workers 1`` started on it, timed to its first
``/health`` answer and to its first gallery search answer, and its resident memory (the whole process tree) after
the runs; then p50/p95 over HTTP, one request at a time with an uncapped key, of ``get_book``, ``get_quote``,
``get_book_text`` (50 pages), ``list_books`` with a search, the gallery search and ``search_within_book`` (words of
each book's own language, common and rare), on random books. The catalog backend is the one settings name
(``IMAGESVC_CATALOG_BACKEND`` where the branch has it); each backend is one column set, so a second backend's run
sits beside the first. The text model is off (dense text vectors are computed once by ``imagesvc index`` and are
not part of a node's start here).

    .venv/bin/python benchmarks/catalog_scale.py DATA_DIR [DATA_DIR ...] [--samples 200]

Latencies on a shared 2-core host are noisy: the two sizes are measured in the same run, one after the other.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from imagesvc.catalog import Catalog
from imagesvc.catalog.api_keys import create_key

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


def _size_gb(data_dir: Path) -> float:
    """The catalog's pages in use (free pages left by a rebuilt index are not counted), in GB."""
    catalog = Catalog(data_dir / "catalog.sqlite3")
    try:
        pages = catalog.query_one("PRAGMA page_count")["page_count"]  # type: ignore[index]
        free = catalog.query_one("PRAGMA freelist_count")["freelist_count"]  # type: ignore[index]
        size = catalog.query_one("PRAGMA page_size")["page_size"]  # type: ignore[index]
    finally:
        catalog.close()
    return (pages - free) * size / 1e9


def _sample(data_dir: Path, n: int, seed: int) -> tuple[list[dict[str, Any]], int, str]:
    """Random live books (id, language, page count), the catalog's page count, and an uncapped key."""
    catalog = Catalog(data_dir / "catalog.sqlite3")
    try:
        pages = catalog.query_one("SELECT max(rowid) AS n FROM pages")["n"]  # type: ignore[index]
        books = catalog.query_all("SELECT id, language FROM books WHERE withdrawn = 0")
        key, _ = create_key(catalog, "enterprise", "catalog_scale benchmark")
    finally:
        catalog.close()
    rng = random.Random(seed)
    return [rng.choice(books) for _ in range(n)], pages, key


def _percentiles(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return ordered[len(ordered) // 2] * 1000, ordered[min(len(ordered) - 1, math.ceil(len(ordered) * 0.95) - 1)] * 1000


async def _latencies(base: str, key: str, books: list[dict[str, Any]], pages_per_book: int) -> dict[str, Any]:
    rng = random.Random(7)
    calls = {
        "reference: rate_limit": lambda b: ("/api/rate_limit", {}),  # no catalog read: the host's own noise
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
    out: dict[str, Any] = {name: [] for name in calls}
    failed: dict[str, str] = {}
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
                    if resp.status != 200:
                        raise RuntimeError(f"{name} {path} {params}: {resp.status} {await resp.text()}")
                out[name].append(time.perf_counter() - start)
    return {name: _percentiles(times) if times else (math.nan, math.nan) for name, times in out.items()}


def _serve(data_dir: Path, port: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "IMAGESVC_DATA_DIR": str(data_dir),
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


async def measure(data_dir: Path, samples: int) -> dict[str, Any]:
    books, pages, key = _sample(data_dir, samples, seed=11)
    pages_per_book = 300
    port = _free_port()
    started = time.monotonic()
    proc = _serve(data_dir, port)
    base = f"http://127.0.0.1:{port}"
    try:
        health = await _wait(f"{base}/health", started + 600)
        health = time.monotonic() - started
        await _wait(f"{base}/api/gallery?q=gold", started + 600)
        first_search = time.monotonic() - started
        rss_started = _rss_mb(proc.pid)
        latencies = await _latencies(base, key, books, pages_per_book)
        rss_after = _rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {
        "pages": pages,
        "size_gb": _size_gb(data_dir),
        "start_health_s": health,
        "start_search_s": first_search,
        "rss_start_mb": rss_started,
        "rss_after_mb": rss_after,
        **{f"{name} p50": v[0] for name, v in latencies.items()},
        **{f"{name} p95": v[1] for name, v in latencies.items()},
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
    args = parser.parse_args()
    from imagesvc.settings import load_settings

    backend = getattr(load_settings({}), "catalog_backend", "sqlite")
    runs = [asyncio.run(measure(d, args.samples)) for d in args.data_dirs]
    print(f"load average after the runs: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    names = list(runs[0])
    head = f"{'figure (' + backend + ')':34}" + "".join(f"{r['pages']:>14,}" for r in runs)
    if len(runs) > 1:
        head += f"{'growth k':>10}{'at 4.5M pages':>16}"
    print(head)
    for name in names[1:]:
        row = f"{name:34}" + "".join(f"{r[name]:>14.2f}" for r in runs)
        if len(runs) > 1:
            k, at = _extrapolate(runs[0], runs[-1], name)
            row += f"{k:>10.2f}{at:>16.2f}"
        print(row)
    print(f"targets at 4.5 M pages: start <= {TARGETS['start_s']} s, RSS <= {TARGETS['rss_mb']:.0f} MB, "
          f"reads by id p95 <= {TARGETS['read_ms']} ms, searches p95 <= {TARGETS['search_ms']} ms")  # fmt: skip


if __name__ == "__main__":
    main()
