"""A serving worker's first searches against its hundredth: how much of the first search by image and the first
text search is loading that the start-up warm-up (``imagesvc.search.by_image.warm_up``) should have done.

The demo library (tests/library.py: 38 illustrations, its block index) with the tiny CLIP model's vectors and the
default text model, in DATA_DIR (made once). Each mode runs in a fresh process: ``warm`` awaits the warm-up as a
serving worker does before it says it is ready, ``cold`` does not. Then one search by image (a stored illustration's
display tier, through the tool's own path) and one text search (a distinct query each time) are timed, first and the
next ``--runs``, in wall milliseconds.

    nice .venv/bin/python benchmarks/warm_start.py DATA_DIR [--runs 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from imagesvc.catalog import Catalog
from imagesvc.search.by_image import warm_up
from imagesvc.search.engine import engine_for
from imagesvc.search.ranking import Query
from imagesvc.services import Services
from imagesvc.storage.local import LocalStore
from imagesvc.tools.image_search import search_by_picture
from tests.library import build_library, settings_for
from tests.search.conftest import TINY, index_library

WORDS = [
    "furnace",
    "alembic",
    "serpent",
    "tail",
    "dragon",
    "flask",
    "moon",
    "sun",
    "king",
    "queen",
    "tree",
    "plant",
    "root",
    "star",
    "map",
    "ship",
    "city",
    "lion",
]


def prepare(root: Path) -> Path:
    data = root / "data"
    if not (data / "catalog.sqlite3").exists():
        build_library(root)
        asyncio.run(index_library(settings_for(data, **TINY)))
    return data


async def run(data: Path, warm: bool, runs: int) -> dict[str, Any]:
    catalog, store = Catalog(data / "catalog.sqlite3"), LocalStore(data / "store")
    services = Services(settings_for(data, search_wait=600, **TINY), catalog, store)
    started = time.perf_counter()
    if warm:
        await warm_up(services)
    warm_s = time.perf_counter() - started
    ids = catalog.column("SELECT id FROM illustrations WHERE removed = 0 ORDER BY id")
    tiers = catalog.renditions(ids)
    pictures = [(await store.get(tiers[i]["display"]["clean_key"])).data for i in ids if "display" in tiers[i]]
    queries = [f"{a} {b}" for a in WORDS for b in WORDS if a != b]
    image_ms, text_ms = [], []
    for n in range(runs + 1):
        t = time.perf_counter()
        await search_by_picture(services, pictures[n % len(pictures)], None, 10)
        image_ms.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        await engine_for(services).search(Query(text=queries[n % len(queries)]))
        text_ms.append((time.perf_counter() - t) * 1000)
    catalog.close()
    await store.close()
    return {
        "warm-up s": round(warm_s, 2),
        "image: first ms": round(image_ms[0]),
        "image: next p50 ms": round(statistics.median(image_ms[1:])),
        "text: first ms": round(text_ms[0]),
        "text: next p50 ms": round(statistics.median(text_ms[1:])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--mode", choices=["warm", "cold"], help=argparse.SUPPRESS)  # one process's own run
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(asyncio.run(run(args.data_dir / "data", args.mode == "warm", args.runs))))
        return
    prepare(args.data_dir)
    for mode in ("cold", "warm"):
        command = [sys.executable, __file__, str(args.data_dir), "--runs", str(args.runs), "--mode", mode]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        print(mode, done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
