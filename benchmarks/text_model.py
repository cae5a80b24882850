"""The gallery's text model on one core: load time and resident memory, a query's encode, a dense text query over
200,000 illustrations including that encode, and indexing throughput in descriptions per second per core.

    python benchmarks/text_model.py [--model e5] [--illustrations 200000] [--queries 200] [--reference e5]
        [--glossed] [--over-floor 0.9]

The 200,000 illustrations are synthetic (three unit passages each, 384-d, the text index's layout: 600,000 rows); the
query is encoded by the model every time (nothing here keeps a vector; with ``--glossed`` the sets' queries as
typed), scored as ``DenseText.scores`` does (in two steps from ``PREFILTER_FROM`` illustrations on: the means read
from their one-byte codes, the candidates' passages in float32), fused with no keyword scores and ranked (maxPerBook
3, limit 20), as ``SearchEngine.search`` does (``fusion.fuse_rows``; with ``--over-floor`` the random cosines are
shifted so that that share of the illustrations pass the dense floor, as e5's do on the demo library). Timed in
turns beside it: the same two steps with the means in float32 (faiss's products, today's choice of candidates: the path
before the codes but for that choice), the same with numpy's products (the path before faiss), and the exhaustive numpy
scan of every passage, whose ranked page is the reference for the agreement figures (top 20 shared, same first result).
Against the float32 means: the share of their first step's candidates the codes' first step keeps, and of their ranked
page of 20 the codes' page shares. The resident memory the index and its passages added is printed (the float32 means'
copy for the rows before is built after it is read). Indexing embeds the demo library's real descriptions, repeated, in
batches of 64. With ``--reference`` the same rows are timed for another model in the same run (a ratio on this shared
host means more than a figure). Every model is pinned to one thread, as in a serving worker, and so is numpy's BLAS
(``OPENBLAS_NUM_THREADS=1``: its idle threads spin, and their CPU would count against the numpy rows).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # numpy's products on one core too, before numpy loads

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.search import query_texts, synthetic  # noqa: E402
from imagesvc.search.dense import CANDIDATES, Passages, highest  # noqa: E402
from imagesvc.search.fusion import DENSE_FLOOR, fuse_rows  # noqa: E402
from imagesvc.search.ranking import Query, rank  # noqa: E402
from imagesvc.search.text_models import TextModel  # noqa: E402
from imagesvc.search.vectors import VectorIndex  # noqa: E402

__all__ = ["main"]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def descriptions() -> list[str]:
    """The demo library's texts, as the text index embeds them (description, museum description, terms)."""
    books = json.loads((ROOT / "fixtures" / "demo_books.json").read_text(encoding="utf-8"))["books"]
    out = []
    for book in books:
        for page in book["pages"]:
            for ill in page.get("illustrations", []):
                terms = ", ".join([ill.get("type") or "", *ill.get("subjects", []), *ill.get("symbols", [])])
                out += [ill["description"], ill.get("museum_description") or "", terms]
    return [t for t in out if t]


def numpy_two_steps(p: Passages, embeddings: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """The two-step score as it was before faiss's products: numpy's ``gemv`` and a gather of the candidates' rows
    (``p`` with its means in float32)."""
    if p.means is None or p.starts is None or p.counts is None:
        return p.best(embeddings @ vector)
    assert isinstance(p.means, np.ndarray) and (p.second_means is None or isinstance(p.second_means, np.ndarray))
    out = p.means @ vector[: p.split or None]
    if p.split and p.second_means is not None:  # two models' columns, kept as two blocks of means
        tail = vector[p.split :]
        out += p.second_means @ tail
    top = np.sort(np.argpartition(-out, CANDIDATES - 1)[:CANDIDATES])
    starts, counts = p.starts[top], p.counts[top]
    offsets = np.r_[0, np.cumsum(counts)[:-1]]
    rows = np.repeat(starts - offsets, counts) + np.arange(int(counts.sum()))
    out[top] = np.maximum.reduceat(embeddings[rows] @ vector, offsets)
    return out


def glossed_queries(count: int) -> list[str]:
    """The Latin, Hebrew, Italian and Arabic queries of both cross-lingual sets, in turns, as typed (queries that
    are encoded with their dictionary gloss, imagesvc/search/glosses.py), repeated when the sets run out: nothing on
    the path timed keeps a query's vector. (Until 2026-11-28 each was made distinct by a number, which added a token
    or two to every encode.)"""
    found = [
        concept["queries"][lang]
        for name in ("search_eval_languages.json", "search_eval_languages_heldout.json")
        for concept in json.loads((ROOT / "benchmarks" / name).read_text(encoding="utf-8"))["concepts"]
        for lang in ("la", "he", "it", "ar")
    ]
    return [found[k % len(found)] for k in range(count)]


def measure(
    name: str, n: int, count: int, index_texts: int, glossed: bool = False, over_floor: float | None = None
) -> dict[str, float]:
    before = rss_mb()
    started = time.perf_counter()
    model = TextModel(name, threads=1)
    model.load()
    load_s = time.perf_counter() - started
    model.query("warm up")
    grown = rss_mb() - before
    info = model.info
    assert info is not None
    dims = info.dims
    texts = iter((glossed_queries if glossed else query_texts)(3 * count + 8))

    # a dense text query over n illustrations, three passages each
    table, _ = synthetic(n, 8, books=max(1, n // 15))
    held = rss_mb()
    rng = np.random.default_rng(5)
    matrix = rng.standard_normal((3 * n, dims), dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    ids = [i for i in table.ids for _ in range(3)]
    index = VectorIndex(ids, [""] * len(ids), matrix, model.key)
    passages = Passages.of(index, split=info.split)  # two steps, as served
    index_mb = rss_mb() - held
    floats = Passages.of(index, split=info.split, codes=False)  # float32 means: before
    scan = Passages.of(index, prefilter_from=10**12)  # every passage scored: the exhaustive reference
    plain = Query(max_per_book=3, limit=20)
    # raw cosines, each model at its weight; two models' weighted mean doubled, so that the best of random vectors
    # reach the dense floor as one model's raw cosines do, and the page ranked is not empty
    span = 0.5 if info.split else 1.0
    raw = replace(info, shift=0.0, span=span, second_shift=0.0, second_span=span)
    if over_floor is not None:  # shifted so that this share of the illustrations pass the dense floor, as on a library
        first = passages.dense(index.embeddings, model.query(next(texts)), raw)
        shift = float(np.quantile(first, 1 - over_floor)) * span - DENSE_FLOOR * span
        raw = replace(raw, shift=shift, second_shift=shift)

    def numpy_scan(embeddings: np.ndarray, vector: np.ndarray) -> np.ndarray:
        if info.split:  # each model's best passage that the query has a part for, as ``dense`` below
            head, tail = vector[: info.split], vector[info.split :]
            one = scan.best(embeddings[:, : info.split] @ head) if head.any() else None
            two = scan.best(embeddings[:, info.split :] @ tail) if tail.any() else None
            return raw.common(one, two)
        return scan.best(embeddings @ vector)

    def dense(embeddings: np.ndarray, vector: np.ndarray) -> np.ndarray:
        """What DenseText.scores does, but on raw cosines: the random vectors' cosines (about 0) would all fall below
        the dense floor on e5's common scale, and nothing would be ranked. With two models: each one's best passage,
        then their weighted mean (``Passages.dense``)."""
        return passages.dense(embeddings, vector, raw)

    table_rows = table.rows_of(passages.ids, len(passages.ids))  # worked out once per index, as the engine keeps it
    no_hits = (np.zeros(0, np.int64), np.zeros(0))

    def query(vector: np.ndarray, score=dense) -> list[int]:
        best = score(index.embeddings, vector)
        fused = fuse_rows(len(table), table_rows, best, *no_hits)  # as SearchEngine.search: no keyword hits here
        return rank(table, plain, None, None, (fused.rows, fused.scores)).rows

    def legacy(vector: np.ndarray) -> list[int]:
        return query(vector, lambda e, v: numpy_two_steps(floats, e, v))

    def before(vector: np.ndarray) -> list[int]:
        return query(vector, lambda e, v: floats.dense(e, v, raw))

    def first_step(p: Passages, vector: np.ndarray) -> np.ndarray:
        """The first step's score of each illustration (two models' parts summed, as ``Passages.score_parts``)."""
        if not (info.split and vector[info.split :].any()):
            return p._mean_scores(vector)
        one, two = vector.copy(), vector.copy()
        one[info.split :], two[: info.split] = 0, 0
        return p._mean_scores(one) + p._mean_scores(two)

    encode_ms, query_ms, query_cpu, legacy_cpu, scan_cpu, shared, first = [], [], [], [], [], [], []
    before_cpu, kept, same = [], [], []
    query(model.query(next(texts)))
    for _ in range(count):  # in turns, so a load swing on a shared host falls on every row alike
        t = time.perf_counter()
        model.query(next(texts))
        encode_ms.append((time.perf_counter() - t) * 1000)
        text = next(texts)
        t, c = time.perf_counter(), time.process_time()
        got = query(model.query(text))  # what a worker does: encode, score, fuse, rank
        query_ms.append((time.perf_counter() - t) * 1000)
        query_cpu.append((time.process_time() - c) * 1000)
        c = time.process_time()
        theirs = before(model.query(text))
        before_cpu.append((time.process_time() - c) * 1000)
        c = time.process_time()
        legacy(model.query(text))
        legacy_cpu.append((time.process_time() - c) * 1000)
        c = time.process_time()
        want = query(model.query(text), numpy_scan)
        scan_cpu.append((time.process_time() - c) * 1000)
        shared.append(len(set(got) & set(want)) / max(1, len(want)))
        first.append(bool(got[:1] == want[:1]))
        vector = model.query(text)
        ours, float_top = (
            highest(first_step(passages, vector), CANDIDATES),
            highest(first_step(floats, vector), CANDIDATES),
        )
        kept.append(len(np.intersect1d(ours, float_top)) / len(float_top))
        same.append(len(set(got) & set(theirs)) / max(1, len(theirs)))

    # indexing: real descriptions, batches of 64, one thread; CPU seconds as well as wall seconds
    corpus = descriptions()
    batch = (corpus * (index_texts // len(corpus) + 1))[:index_texts]
    wall, cpu = time.perf_counter(), time.process_time()
    model.encode(batch)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "load_s": load_s,
        "rss_mb": grown,
        "encode_p50": float(np.percentile(encode_ms, 50)),
        "encode_p95": float(np.percentile(encode_ms, 95)),
        "query_p50": float(np.percentile(query_ms, 50)),
        "query_p95": float(np.percentile(query_ms, 95)),
        "cpu_p50": float(np.percentile(query_cpu, 50)),
        "cpu_p95": float(np.percentile(query_cpu, 95)),
        "index_mb": index_mb,
        "means_mb": sum(m.nbytes for m in (passages.means, passages.second_means) if m is not None) / 2**20,
        "float_means_mb": sum(m.nbytes for m in (floats.means, floats.second_means) if m is not None) / 2**20,
        "before_p50": float(np.percentile(before_cpu, 50)),
        "before_p95": float(np.percentile(before_cpu, 95)),
        "kept": float(np.mean(kept)),
        "kept_min": float(np.min(kept)),
        "same": float(np.mean(same)),
        "legacy_p50": float(np.percentile(legacy_cpu, 50)),
        "legacy_p95": float(np.percentile(legacy_cpu, 95)),
        "shared": float(np.mean(shared)),
        "first": float(np.mean(first)),
        "scan_p50": float(np.percentile(scan_cpu, 50)),
        "scan_p95": float(np.percentile(scan_cpu, 95)),
        "per_cpu_s": index_texts / cpu,
        "per_wall_s": index_texts / wall,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="e5+minilm", choices=["e5+minilm", "e5"])
    parser.add_argument(
        "--reference",
        choices=["e5+minilm", "e5"],
        help="also time this model, in the same run",
    )
    parser.add_argument("--illustrations", type=int, default=200_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--index-texts", type=int, default=512)
    parser.add_argument(
        "--glossed",
        "--latin-hebrew",
        action="store_true",
        help="queries: the sets' Latin, Hebrew and Italian ones (glossed; --latin-hebrew: its name before Italian)",
    )
    parser.add_argument(
        "--over-floor",
        type=float,
        help="shift the random cosines so that this share of the illustrations pass the dense floor (on the demo "
        "library 0.4 to 1.0 of them do: e5's cosines lie in a narrow band); default: unshifted, almost none pass",
    )
    args = parser.parse_args()
    print(f"host: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}", end="")
    print(f"; {args.over_floor:.0%} of the illustrations over the dense floor" if args.over_floor is not None else "")
    rows = {
        m: measure(m, args.illustrations, args.queries, args.index_texts, args.glossed, args.over_floor)
        for m in filter(None, [args.model, args.reference])
    }
    print(f"\n{args.illustrations:,} illustrations (x3 passages), {args.queries} fresh queries, one thread")
    print(
        "| model | load s | RSS growth MB | encode p50 / p95 ms | query incl. encode p50 / p95 ms, wall | same, CPU ms "
        "| two steps, numpy (before), CPU ms | every passage scored, numpy, CPU ms | top 20 shared / same first "
        "| descriptions/s per core (CPU) | 200,000 illustrations: core-hours |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for m, r in rows.items():
        hours = 3 * 200_000 / r["per_cpu_s"] / 3600
        print(
            f"| {m} | {r['load_s']:.2f} | {r['rss_mb']:.0f} | {r['encode_p50']:.1f} / {r['encode_p95']:.1f} | "
            f"{r['query_p50']:.1f} / {r['query_p95']:.1f} | {r['cpu_p50']:.1f} / {r['cpu_p95']:.1f} | "
            f"{r['legacy_p50']:.1f} / {r['legacy_p95']:.1f} | {r['scan_p50']:.1f} / {r['scan_p95']:.1f} | "
            f"{r['shared']:.3f} / {r['first']:.2f} | "
            f"{r['per_cpu_s']:.1f} ({r['per_wall_s']:.1f} wall) | {hours:.1f} |"
        )
    print(
        "\n| model | query incl. encode, means from codes (now), CPU ms | same, means in float32, CPU ms "
        "| means MB, codes / float32 | index and passages, RSS MB | first step's candidates kept, mean / least "
        "| top 20 shared with float32 means |"
    )
    print("|---|---|---|---|---|---|---|")
    for m, r in rows.items():
        print(
            f"| {m} | {r['cpu_p50']:.1f} / {r['cpu_p95']:.1f} | {r['before_p50']:.1f} / {r['before_p95']:.1f} | "
            f"{r['means_mb']:.0f} / {r['float_means_mb']:.0f} | {r['index_mb']:.0f} | "
            f"{r['kept']:.4f} / {r['kept_min']:.4f} | {r['same']:.3f} |"
        )
    for m, r in rows.items():
        print(
            f"{m}: query CPU p50 {r['cpu_p50'] / r['legacy_p50']:.2f}x, p95 {r['cpu_p95'] / r['legacy_p95']:.2f}x "
            f"the numpy two steps; {r['cpu_p50'] / r['before_p50']:.2f}x, {r['cpu_p95'] / r['before_p95']:.2f}x the "
            f"float32 means; {r['cpu_p95'] / r['scan_p95']:.2f}x the exhaustive scan at p95"
        )
    if args.reference:
        a, b = rows[args.model], rows[args.reference]
        print(
            f"\n{args.model} / {args.reference}: query p95 {a['query_p95'] / b['query_p95']:.2f}x, "
            f"indexing {a['per_cpu_s'] / b['per_cpu_s']:.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
