"""Ingest throughput: pages per second for a generated 100-page book, on the process pool of this machine.

Run: ``.venv/bin/python benchmarks/ingest.py [--pages 100] [--workers 2] [--side 2400]``. Pages are generated demo
pages (JPEG masters, ~``side`` px on the long side, one or two illustrations each); generation is not timed. Prints
the cold ingest time, the pages per second, and the time of a rerun (which must write nothing).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from fixtures.demo_draw import PANEL_COLOURS, bbox_pixels, render_page  # noqa: E402
from tests.library import run_ingest, settings_for  # noqa: E402


def make_book(root: Path, pages: int, side: int) -> Path:
    (root / "images").mkdir(parents=True)
    entries = []
    for n in range(1, pages + 1):
        size = (round(side * 0.71), side)
        boxes = [{"x": 0.12, "y": 0.15, "width": 0.5, "height": 0.3}]
        if n % 2:
            boxes.append({"x": 0.3, "y": 0.55, "width": 0.45, "height": 0.25})
        panels = [
            (bbox_pixels(b, size), "plant", PANEL_COLOURS[(n + i) % len(PANEL_COLOURS)]) for i, b in enumerate(boxes)
        ]
        page = render_page(
            size, header=f"Benchmark book · {n}", text="lorem ipsum " * 200, rtl=False, panels=panels, seed=n, grain=6.0
        )
        page.save(root / "images" / f"{n:03d}.jpg", quality=90)
        entries.append(
            {
                "number": n,
                "image": f"images/{n:03d}.jpg",
                "ocr": f"page {n}",
                "illustrations": [{"bbox": b, "type": "woodcut"} for b in boxes],
            }
        )
    manifest = {
        "version": 1,
        "books": [
            {
                "slug": "benchmark-book",
                "title": "Benchmark book (generated)",
                "author": "Nobody",
                "language": "Latin",
                "attribution": {"institution": "Benchmarks", "item_url": "https://example.org/bench"},
                "pages": entries,
            }
        ],
    }
    path = root / "manifest.json"
    path.write_text(json.dumps(manifest))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pages", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--side", type=int, default=2400)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        manifest = make_book(root / "src", args.pages, args.side)
        settings = settings_for(root / "data", workers=args.workers)
        started = time.perf_counter()
        cold = run_ingest(manifest, settings)
        seconds = time.perf_counter() - started
        started = time.perf_counter()
        rerun = run_ingest(manifest, settings)
        again = time.perf_counter() - started
    print(f"{args.pages} pages of ~{args.side} px, {cold.illustrations} illustrations, {args.workers} workers")
    print(f"cold ingest: {seconds:.1f} s = {args.pages / seconds:.2f} pages/s ({cold.objects_written} objects)")
    print(f"rerun: {again:.2f} s, {rerun.objects_written} objects written")


if __name__ == "__main__":
    main()
