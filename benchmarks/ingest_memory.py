"""Peak memory of a real ``imagesvc ingest``: one worker on a 231 Mpx PNG, and a whole ingest under a budget.

Generates its masters (streamed, never held whole in memory), runs ``imagesvc ingest`` as a subprocess, and samples
the resident memory of its whole process tree (the ingest, its pool workers, the resource tracker) from /proc every
20 ms. Prints the peaks beside the targets: one worker on 231 Mpx <= 2.5 GiB; a whole ingest <= its budget.

    .venv/bin/python benchmarks/ingest_memory.py [--side 15200] [--budget-mib 1536] [--pages 6] [--page-mpx 40]
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

import numpy as np

IMAGESVC = str(Path(sys.executable).with_name("imagesvc"))
MIB = 1 << 20


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def write_png(path: Path, width: int, height: int, seed: int = 0) -> None:
    """An RGB PNG of a generated page (parchment gradient, dark ruled lines), written row by row."""
    rng = np.random.default_rng(seed)
    x = np.arange(width)
    base = np.stack([236 - (x * 20 // width), 224 - (x * 16 // width), 196 - (x * 12 // width)], axis=1)
    compressor = zlib.compressobj(6)
    with path.open("wb") as out:
        out.write(b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)))
        for y in range(height):
            row = base.copy()
            if y % 40 < 3:  # ruled lines with some ink noise
                row = np.clip(row - 150 + rng.integers(0, 30, row.shape), 0, 255)
            data = compressor.compress(b"\x00" + row.astype(np.uint8).tobytes())
            if data:
                out.write(_chunk(b"IDAT", data))
        out.write(_chunk(b"IDAT", compressor.flush()) + _chunk(b"IEND", b""))


def _tree(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    found, frontier = {root}, {root}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return sorted(found)


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))
    except (OSError, StopIteration):
        return 0


def run_ingest(manifest: Path, data: Path, workers: int, budget: int) -> tuple[float, int, int, str]:
    """Run ingest; return (seconds, peak of the process tree's summed RSS, peak RSS of any one process, summary)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGESVC_")}
    env |= {"IMAGESVC_DATA_DIR": str(data), "IMAGESVC_WORKERS": str(workers)}
    env |= {"IMAGESVC_INGEST_MEMORY_BYTES": str(budget), "IMAGESVC_MAX_IMAGE_PIXELS": "250000000"}
    started = time.monotonic()
    proc = subprocess.Popen([IMAGESVC, "ingest", str(manifest), "--quiet"], env=env, stdout=subprocess.PIPE)
    peak = single = 0

    def sample() -> None:
        nonlocal peak, single
        while proc.poll() is None:
            sizes = [_rss(pid) for pid in _tree(proc.pid)]
            peak, single = max(peak, sum(sizes)), max(single, *sizes)
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    out, _ = proc.communicate()
    sampler.join()
    return time.monotonic() - started, peak, single, out.decode().strip()


def manifest_for(root: Path, images: list[str]) -> Path:
    pages = [{"number": i, "image": name} for i, name in enumerate(images, start=1)]
    book = {
        "slug": "memory-benchmark",
        "title": "Generated pages for the memory benchmark",
        "author": "Generated",
        "language": "Latin",
        "attribution": {"institution": "Benchmark", "item_url": "https://example.org/item/1"},
        "pages": pages,
    }
    path = root / "manifest.json"
    path.write_text(json.dumps({"version": 1, "books": [book]}))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--side", type=int, default=15200, help="side of the square PNG (15200: 231 Mpx)")
    parser.add_argument("--budget-mib", type=int, default=1536, help="IMAGESVC_INGEST_MEMORY_BYTES of the whole run")
    parser.add_argument("--pages", type=int, default=6, help="pages of the whole-ingest run")
    parser.add_argument("--page-mpx", type=int, default=40, help="megapixels of each page of the whole-ingest run")
    parser.add_argument("--workers", type=int, default=2, help="IMAGESVC_WORKERS of the whole-ingest run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        big = root / "big.png"
        write_png(big, args.side, args.side)
        pixels = args.side * args.side
        seconds, peak, single, line = run_ingest(manifest_for(root, [big.name]), root / "one", 1, 64 << 30)
        print(f"one worker, {args.side}x{args.side} PNG ({pixels / 1e6:.0f} Mpx, {big.stat().st_size / MIB:.1f} MiB):")
        print(f"  peak RSS of the worker {single / MIB:,.0f} MiB ({single / pixels:.1f} B/px), target 2,560 MiB")
        print(f"  peak RSS of the process tree (ingest, worker, tracker) {peak / MIB:,.0f} MiB")
        print(f"  {seconds:.1f} s; {line}")
        big.unlink()
        side = int((args.page_mpx * 1e6) ** 0.5)
        names = []
        for i in range(args.pages):
            write_png(root / f"p{i}.png", side, side + i, seed=i)
            names.append(f"p{i}.png")
        budget = args.budget_mib * MIB
        seconds, peak, _, line = run_ingest(manifest_for(root, names), root / "all", args.workers, budget)
        print(f"whole ingest, {args.pages} pages of {side}x{side} ({args.page_mpx} Mpx), {args.workers} workers:")
        print(f"  peak RSS of the process tree {peak / MIB:,.0f} MiB, budget {budget / MIB:,.0f} MiB")
        print(f"  {seconds:.1f} s; {line}")


if __name__ == "__main__":
    main()
