"""Where a dense text query's search part goes over 200,000 illustrations, step by step, with the prefilter's means
in one-byte codes (the service) and in float32 (before), timed in turns on the same query; and the resident memory
each keeps.

    python benchmarks/dense_steps.py [--illustrations 200000] [--queries 60]

The index is ``text_model.py``'s (three random unit passages per illustration, 384-d); the queries are random unit
vectors (the search part does not depend on the text). Steps, CPU ms p50 / p95 on one thread: the first step (every
mean with the query), choosing the ``CANDIDATES`` (``dense.highest`` now; ``argpartition`` then a sort before), the
candidates' rows, their passages' product, the best per candidate, then fusion and ranking (maxPerBook 3, limit 20)
on raw cosines, and the whole of ``Passages.score`` as the service runs it. Memory: the RSS each ``Passages.of``
added (the float32 means are a temporary of both), and what its means hold.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.search import synthetic  # noqa: E402
from benchmarks.text_model import rss_mb  # noqa: E402
from imagesvc.search.dense import CANDIDATES, Passages, dot, highest  # noqa: E402
from imagesvc.search.fusion import fuse_rows  # noqa: E402
from imagesvc.search.ranking import Query, rank  # noqa: E402
from imagesvc.search.vectors import VectorIndex  # noqa: E402

__all__ = ["main"]


def argpartition_top(scores: np.ndarray, count: int) -> np.ndarray:
    """The candidates as chosen before: ``argpartition`` of the negated scores, then a sort into row order."""
    return np.sort(np.argpartition(-scores, count - 1)[:count])


def steps(
    p: Passages, table, table_rows: np.ndarray, embeddings: np.ndarray, vector: np.ndarray, choose: Callable
) -> dict[str, float]:
    """``Passages.score_parts`` for one vector, then fusion and ranking, each step's CPU ms (``table_rows``: the
    table row of each illustration of ``p``, worked out once, as the engine keeps it)."""
    assert p.means is not None and p.starts is not None and p.counts is not None
    out: dict[str, float] = {}
    c = time.process_time()

    def tick(name: str) -> None:
        nonlocal c
        now = time.process_time()
        out[name] = (now - c) * 1000
        c = now

    scores = p._mean_scores(vector)
    tick("first step: every mean")
    top = choose(scores, CANDIDATES)
    tick("choose the candidates")
    starts, counts = p.starts[top], p.counts[top]
    offsets = np.r_[0, np.cumsum(counts)[:-1]]
    rows = np.repeat(starts - offsets, counts) + np.arange(int(counts.sum()))
    tick("the candidates' rows")
    products = dot(embeddings, vector, rows)
    tick("their passages' product")
    scores[top] = np.maximum.reduceat(products, offsets)
    tick("best per candidate")
    fused = fuse_rows(len(table), table_rows, scores, np.zeros(0, np.int64), np.zeros(0))
    tick("fuse")
    rank(table, Query(max_per_book=3, limit=20), None, None, (fused.rows, fused.scores))
    tick("rank")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--illustrations", type=int, default=200_000)
    parser.add_argument("--queries", type=int, default=60)
    args = parser.parse_args()
    n, dims = args.illustrations, 384
    print(f"host: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    table, _ = synthetic(n, 8, books=max(1, n // 15))
    rng = np.random.default_rng(5)
    matrix = rng.standard_normal((3 * n, dims), dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    ids = [i for i in table.ids for _ in range(3)]
    index = VectorIndex(ids, [""] * len(ids), matrix, "synthetic")
    held = rss_mb()
    coded = Passages.of(index)
    coded_mb, held = rss_mb() - held, rss_mb()
    floats = Passages.of(index, codes=False)
    float_mb = rss_mb() - held
    assert coded.means is not None and floats.means is not None
    held_codes, held_floats = coded.means.nbytes / 2**20, floats.means.nbytes / 2**20
    print(
        f"{n:,} illustrations: Passages.of added {coded_mb:.0f} MB of RSS with the codes ({held_codes:.0f} MB of "
        f"means), {float_mb:.0f} MB with float32 means ({held_floats:.0f} MB)"
    )
    queries = rng.standard_normal((args.queries + 1, dims), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    paths: dict[str, tuple[Passages, Callable]] = {
        "codes, highest (now)": (coded, highest),
        "float32, argpartition (before)": (floats, argpartition_top),
    }
    table_rows = table.rows_of(coded.ids, len(coded.ids))
    taken: dict[str, dict[str, list[float]]] = {name: {} for name in paths}
    whole: dict[str, list[float]] = {"codes (now)": [], "float32 (before)": []}
    kept = []
    for k, vector in enumerate(queries):  # in turns, so a load swing on a shared host falls on every row alike
        for name, (p, choose) in paths.items():
            for step, ms in steps(p, table, table_rows, index.embeddings, vector, choose).items():
                taken[name].setdefault(step, []).append(ms)
        for name, p in zip(whole, (coded, floats), strict=True):
            c = time.process_time()
            p.score(index.embeddings, vector)
            whole[name].append((time.process_time() - c) * 1000)
        ours, theirs = (
            highest(coded._mean_scores(vector), CANDIDATES),
            argpartition_top(floats._mean_scores(vector), CANDIDATES),
        )
        kept.append(len(np.intersect1d(ours, theirs)) / len(theirs))
        if k == 0:  # the first query warms both paths up: not counted
            taken = {name: {} for name in paths}
            whole = {name: [] for name in whole}
            kept = []

    def cell(values: list[float]) -> str:
        return f"{np.percentile(values, 50):.2f} / {np.percentile(values, 95):.2f}"

    names = list(paths)
    print(f"\n{args.queries} queries, CPU ms p50 / p95, one thread")
    print("| step | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for step in taken[names[0]]:
        print(f"| {step} | " + " | ".join(cell(taken[name][step]) for name in names) + " |")
    sums = {name: np.sum([v for v in taken[name].values()], axis=0) for name in names}
    print("| all of the above | " + " | ".join(cell(list(sums[name])) for name in names) + " |")
    print("| `Passages.score` as the service runs it | " + " | ".join(cell(v) for v in whole.values()) + " |")
    print(f"\nthe float32 means' candidates the codes keep: {np.mean(kept):.4f} (least {np.min(kept):.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
