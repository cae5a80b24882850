"""Peak memory of ``imagesvc ingest`` on one large manifest against the same library as a folder of per-book
manifests: text-only pages (no images), generated like ``catalog_generate.py`` (~5.4 KB of text a page).

Runs each ingest as a subprocess into a fresh data dir and samples the resident memory of its process tree from /proc
every 20 ms. The 50-book default is ~15,000 pages, about the 83.7 MB manifest the issue measured.

    .venv/bin/python benchmarks/manifest_memory.py [--books 50] [--pages 300]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from catalog_generate import (
    ENGLISH,
    LANGUAGES,
    ORIGINAL_BYTES,
    TRANSLATION_BYTES,
    Words,
)
from catalog_scale import _rss_mb

IMAGESVC = str(Path(sys.executable).with_name("imagesvc"))


def books(n: int, pages: int) -> list[dict]:
    latin = Words(LANGUAGES["Latin"][1].split(), False, random.Random(1))
    english = Words(ENGLISH, False, random.Random(2))
    return [
        {
            "slug": f"book-{b:05d}",
            "title": f"Book {b}",
            "author": "Anon.",
            "language": "Latin",
            "attribution": {"institution": "Demo", "item_url": f"https://example.org/{b}"},
            "pages": [
                {
                    "number": p,
                    "image": None,
                    "ocr": latin.text(2200),
                    "translation": english.text(TRANSLATION_BYTES),
                    "original": latin.text(ORIGINAL_BYTES) if p % 5 < 3 else None,
                }
                for p in range(1, pages + 1)
            ],
        }
        for b in range(n)
    ]


def peak_ingest(args: list[str], data_dir: Path) -> tuple[float, float]:
    """(peak RSS in MB, seconds) of ``imagesvc ingest ARGS`` into ``data_dir``."""
    env = {**os.environ, "IMAGESVC_DATA_DIR": str(data_dir), "IMAGESVC_WORKERS": "1"}
    started = time.monotonic()
    proc = subprocess.Popen([IMAGESVC, "ingest", *args, "--quiet"], env=env, stdout=subprocess.DEVNULL)
    peak = 0.0
    while proc.poll() is None:
        peak = max(peak, _rss_mb(proc.pid))
        time.sleep(0.02)
    if proc.returncode != 0:
        raise RuntimeError(f"ingest exited {proc.returncode}")
    return peak, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--books", type=int, default=50)
    parser.add_argument("--pages", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        library = books(args.books, args.pages)
        whole = root / "library.json"
        whole.write_text(json.dumps({"version": 1, "books": library}))
        folder = root / "books"
        folder.mkdir()
        for book in library:
            (folder / f"{book['slug']}.json").write_text(json.dumps({"version": 1, "books": [book]}))
        del library
        size = whole.stat().st_size / 1e6
        one = peak_ingest([str(whole)], root / "one")
        many = peak_ingest([str(folder)], root / "many")
    print(f"{args.books} books x {args.pages} pages, manifest {size:.1f} MB")
    print(f"{'ingest of':28}{'peak RSS MB':>14}{'seconds':>10}")
    print(f"{'one manifest':28}{one[0]:>14.0f}{one[1]:>10.0f}")
    print(f"{'a folder of per-book ones':28}{many[0]:>14.0f}{many[1]:>10.0f}")
    print(f"peak RSS, folder / one manifest: {many[0] / one[0]:.2f}")


if __name__ == "__main__":
    main()
