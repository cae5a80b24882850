"""HTML page latency on the demo library: each page for people beside the API call that returns the same content
(the reference, measured in the same run against the same server), sequentially and with a few clients at once.

The server runs as its own process (``imagesvc serve``) over an ingested data dir; every route is measured with its
own enterprise key, so the request limit never interferes (a key's text is sealed: the slower path for the quote).

Usage: .venv/bin/python benchmarks/pages.py [--data DIR] [--requests 200] [--concurrency 4]
Without --data the demo library is generated and ingested into a temporary folder first (about a minute).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from imagesvc.catalog import Catalog  # noqa: E402
from imagesvc.catalog.api_keys import create_key  # noqa: E402

__all__ = ["main"]

BOOK = "demo-speculum-fornacum"
# (label, page path, API path returning the same content or None)
ROUTES = [
    ("gallery search", "/?q=furnace", "/api/gallery?q=furnace"),
    ("gallery, filtered", "/?type=woodcut&year_from=1500&book=demo-traite-des-mines", None),
    ("collections", "/collections", "/api/gallery/collections"),
    ("one collection", "/collections/demo-highlights", "/api/gallery/collections/demo-highlights"),
    ("book page", f"/book/{BOOK}", f"/api/books/{BOOK}"),
    ("reading page (citation URL)", f"/book/{BOOK}?page=6", f"/api/books/{BOOK}/quote?page=6"),
    ("reading page, no image", "/book/demo-traite-des-mines?page=7", None),
    ("illustration", "/illustration/6bdb33845af66013-6:0", None),
]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _library() -> Path:
    from tests.library import build_library

    _, data, _ = build_library(Path(tempfile.mkdtemp(prefix="pages-bench-")))
    return data


async def _wait(url: str) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(200):
            try:
                async with session.get(url + "/health") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise SystemExit("the server did not start")


async def _measure(session: aiohttp.ClientSession, url: str, key: str, n: int, concurrency: int) -> list[float]:
    headers = {"Authorization": f"Bearer {key}", "Accept": "text/html"}
    times: list[float] = []
    queue = list(range(n))

    async def worker() -> None:
        while queue:
            queue.pop()
            start = time.perf_counter()
            async with session.get(url, headers=headers) as resp:
                await resp.read()
                if resp.status != 200:
                    raise SystemExit(f"{url}: HTTP {resp.status}")
            times.append((time.perf_counter() - start) * 1000)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return times


def _p(times: list[float], q: float) -> float:
    return statistics.quantiles(times, n=100, method="inclusive")[int(q) - 1]


async def run(base: str, keys: list[str], n: int, concurrency: int) -> None:
    print(f"{n} requests per route after 10 warm-up; p50 / p95 in ms; ratio = page p50 / API p50")
    print(f"{'route':32} {'page p50':>9} {'page p95':>9} {'p95 x' + str(concurrency):>9} {'API p50':>8} {'ratio':>6}")
    async with aiohttp.ClientSession() as session:
        for i, (label, page, api) in enumerate(ROUTES):
            key = keys[i]
            await _measure(session, base + page, key, 10, 1)
            seq = await _measure(session, base + page, key, n, 1)
            par = await _measure(session, base + page, key, n, concurrency)
            ref = await _measure(session, base + api, keys[len(ROUTES) + i], n, 1) if api else None
            cells = f"{_p(seq, 50):9.1f} {_p(seq, 95):9.1f} {_p(par, 95):9.1f}"
            if ref:
                cells += f" {_p(ref, 50):8.1f} {_p(seq, 50) / _p(ref, 50):6.2f}"
            print(f"{label:32} {cells}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="an ingested data dir (default: build the demo library)")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    data = args.data or _library()
    catalog = Catalog(data / "catalog.sqlite3")
    try:
        keys = [create_key(catalog, "enterprise", f"pages benchmark {i}")[0] for i in range(2 * len(ROUTES))]
    finally:
        catalog.close()
    port = _port()
    env = {**os.environ, "IMAGESVC_DATA_DIR": str(data), "IMAGESVC_PORT": str(port), "IMAGESVC_LOG_LEVEL": "warning"}
    server = subprocess.Popen([str(Path(sys.executable).with_name("imagesvc")), "serve"], env=env, cwd=ROOT)
    try:
        base = f"http://127.0.0.1:{port}"
        asyncio.run(_wait(base))
        asyncio.run(run(base, keys, args.requests, args.concurrency))
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
