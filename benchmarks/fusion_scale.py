"""Fusion and ranking of one text query over 200,000 illustrations, as a share of them pass the dense floor: the
arrays on table rows the engine fuses in now (``fusion.fuse_rows``, then ``rank`` on (rows, scores)) beside dicts of
illustration ids (how it fused before: a dict of every result, mapped back to rows id by id).

    python benchmarks/fusion_scale.py [--illustrations 200000] [--runs 15]

e5's cosines lie in a narrow band (0.75 to 0.9 on its common scale's inputs), so on a real library a large share of
illustrations pass ``DENSE_FLOOR``; the synthetic index of ``text_model.py`` (random vectors) puts almost none over
it, and so does not show this cost. Each share is scored with 200 keyword matches, both ways give the same page
(asserted), one thread, CPU ms p50 of ``--runs``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.search import synthetic  # noqa: E402
from imagesvc.search.fusion import DENSE_FLOOR, W_FTS, fuse_rows  # noqa: E402
from imagesvc.search.ranking import Query, rank  # noqa: E402

__all__ = ["main"]


def by_ids(ids: list[str], where: dict[str, int], dense: np.ndarray, fts: dict[str, float]) -> dict[str, float]:
    """The fused scores as a dict of illustration ids (the way before ``fuse_rows``; ``where``: each id's position,
    kept between queries as it was)."""
    keep = np.flatnonzero(dense >= DENSE_FLOOR)
    cos = dict(zip(map(ids.__getitem__, keep.tolist()), dense[keep].tolist(), strict=True))
    for iid in fts:
        if iid in where:
            cos.setdefault(iid, float(dense[where[iid]]))
    fused = {iid: c + W_FTS * fts.get(iid, 0.0) for iid, c in cos.items()}
    for iid, s in fts.items():
        fused.setdefault(iid, W_FTS * s)
    return fused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--illustrations", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    n = args.illustrations
    table, _ = synthetic(n, 8, books=max(1, n // 15))
    ids = list(table.ids)
    rows = table.rows_of(ids, len(ids))  # the engine works this out once per index and table
    where = {iid: n for n, iid in enumerate(ids)}
    rng = np.random.default_rng(0)
    page = Query(max_per_book=3, limit=20)
    print(f"{n:,} illustrations, 200 keyword matches, one thread, CPU ms p50 of {args.runs}")
    print()
    print("| share over the dense floor | dicts of ids (before) | arrays on rows (now) | ratio |")
    print("|---|---|---|---|")
    for share in (0.02, 0.1, 0.25, 0.6, 0.9):
        over = rng.random(n) < share
        dense = np.where(over, rng.uniform(DENSE_FLOOR, 0.6, n), rng.uniform(-0.1, DENSE_FLOOR - 1e-3, n))
        dense = dense.astype(np.float32)
        hits, scores = rng.choice(n, 200, replace=False), rng.random(200)
        fts = dict(zip((ids[h] for h in hits), scores.tolist(), strict=True))

        def before(dense: np.ndarray = dense, fts: dict[str, float] = fts) -> list[int]:
            return rank(table, page, None, None, by_ids(ids, where, dense, fts)).rows

        def now(dense: np.ndarray = dense, hits: np.ndarray = hits, scores: np.ndarray = scores) -> list[int]:
            fused = fuse_rows(n, rows, dense, hits, scores)
            return rank(table, page, None, None, (fused.rows, fused.scores)).rows

        assert before() == now()
        times = {}
        for name, run in (("before", before), ("now", now)):
            taken = []
            for _ in range(args.runs):
                c = time.process_time()
                run()
                taken.append((time.process_time() - c) * 1000)
            times[name] = float(np.median(taken))
        print(f"| {share:.2f} | {times['before']:.1f} | {times['now']:.1f} | {times['now'] / times['before']:.2f}x |")


if __name__ == "__main__":
    main()
