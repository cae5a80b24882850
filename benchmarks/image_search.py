"""Search by image at size: recall@10 of the true printings per degradation, ``same_block`` precision, query latency,
index memory and indexing CPU per illustration, over a generated library of woodcut-like illustrations
(``fixtures/woodcuts.py``), beside the former pHash-window brute force on a subset measured in the same run.

Usage: .venv/bin/python benchmarks/image_search.py [--size 20000] [--queries 30] [--reference 600] [--workers 2]
       [--neighbours 8] [--nprobe 8] [--candidates 60] [--cache DIR]

Indexing is what ``imagesvc index`` does per illustration: the stored picture (a JPEG at 600-1,000 px) decoded
reduced, ORB features extracted, on ``--workers`` processes; then the faiss index built. Rendering the synthetic
illustrations is not counted. Queries run one at a time on one core (faiss held to one thread), as a serving node
runs each; latency is wall time of extraction + search + verification, and CPU time beside it (the machine is
shared: CPU time is the steadier figure).
"""

from __future__ import annotations

import argparse
import io
import os
import random
import resource
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import phash_reference as ref
from fixtures.woodcuts import DEGRADATIONS, Illustration, degrade, library, render
from imagesvc.search import feature_index
from imagesvc.search.feature_index import FLAT_UNTIL, FeatureIndex, build_index, same_block
from imagesvc.search.features import QUERY_KEYPOINTS, QUERY_SIDE, STORED_SIDE, Features, decode_reduced, extract

__all__ = ["main"]


def _stored_jpeg(ill: Illustration, size: int) -> bytes:
    buf = io.BytesIO()
    render(ill, size).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def _index_one(args: tuple[Illustration, int]) -> tuple[np.ndarray, np.ndarray, float]:
    """Worker: render the stored JPEG (not counted), then decode reduced + extract (counted, CPU seconds)."""
    ill, size = args
    data = _stored_jpeg(ill, size)
    t = time.process_time()
    f = extract(decode_reduced(data, STORED_SIDE))
    return f.xy, f.desc, time.process_time() - t


def _thumb(args: tuple[Illustration, int]) -> np.ndarray:
    ill, size = args
    img = render(ill, size)
    img.thumbnail((300, 300))
    return np.asarray(img)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _query_set(lib: list[Illustration], per: int, seed: int) -> list[Illustration]:
    """Printings of reused blocks, one per block, ``per`` of them."""
    seen, out = set(), []
    for ill in random.Random(seed).sample(lib, len(lib)):
        if ill.kind == "printing" and ill.block not in seen:
            seen.add(ill.block)
            out.append(ill)
    return out[:per]


def _score(found: list[int], truth: set[int]) -> tuple[float, int, int]:
    top = found[:10]
    return len(truth & set(top)) / min(10, len(truth)), sum(n in truth for n in found), len(found)


def _report(name: str, rows: dict[str, list[tuple[float, int, int, float, float]]]) -> None:
    print(f"\n{name}")
    print(f"{'degradation':12} {'recall@10':>9} {'same_block prec':>15} {'p50 ms':>7} {'p95 ms':>7} {'p95 cpu ms':>10}")
    allr = []
    for how, r in rows.items():
        a = np.array(r)
        allr.extend(r)
        prec = a[:, 1].sum() / max(1, a[:, 2].sum())
        p50, p95 = np.percentile(a[:, 3], [50, 95]) * 1000
        print(
            f"{how:12} {a[:, 0].mean():9.3f} {prec:15.3f} {p50:7.0f} {p95:7.0f} "
            f"{np.percentile(a[:, 4], 95) * 1000:10.0f}"
        )
    a = np.array(allr)
    p50, p95 = np.percentile(a[:, 3], [50, 95]) * 1000
    print(f"{'all':12} {a[:, 0].mean():9.3f} {a[:, 1].sum() / max(1, a[:, 2].sum()):15.3f} {p50:7.0f} {p95:7.0f}")


def _build(lib: list[Illustration], size: int, args: argparse.Namespace) -> tuple[FeatureIndex, str]:
    """Indexing as ``imagesvc index`` does it, timed: features on all workers, then the faiss index."""
    import faiss

    # indexing: features on all workers, then the faiss index
    rss0 = _rss_mb()
    started = time.perf_counter()
    feats: list[Features] = []
    cpu = 0.0
    with ProcessPoolExecutor(args.workers) as pool:
        for xy, desc, c in pool.map(_index_one, [(i, size) for i in lib], chunksize=32):
            feats.append(Features(xy, desc, (0, 0)))
            cpu += c
    extract_wall = time.perf_counter() - started
    total = sum(len(f.desc) for f in feats)
    faiss.omp_set_num_threads(args.workers)
    t0, c0 = time.perf_counter(), time.process_time()
    train = None
    if total > FLAT_UNTIL:
        pick = np.random.default_rng(0).choice(len(feats), size=min(len(feats), 4000), replace=False)
        train = np.concatenate([feats[int(n)].desc for n in pick])
    index = build_index([feats], total, train)
    build_wall, build_cpu = time.perf_counter() - t0, time.process_time() - c0
    del feats
    faiss.omp_set_num_threads(1)
    kind = type(index.index).__name__
    print(
        f"indexing: extraction {cpu / size * 1000:.1f} ms CPU per illustration (decode reduced + ORB; wall "
        f"{extract_wall:.0f}s), faiss {kind} build {build_cpu / size * 1000:.1f} ms CPU per illustration "
        f"(wall {build_wall:.0f}s, {args.workers} threads); total {(cpu + build_cpu) / size * 1000:.1f} ms CPU per "
        f"illustration"
    )
    print(
        f"index: {total:,} descriptors, {index.memory_bytes() / 2**20:.0f} MiB held "
        f"({index.memory_bytes() / size / 1024:.1f} KiB per illustration); process max RSS grew "
        f"{_rss_mb() - rss0:.0f} MiB"
    )
    return index, kind


def _cache_paths(cache: Path, size: int) -> tuple[Path, Path]:
    return cache / f"features-{size}.faiss", cache / f"positions-{size}.npz"


def _save_cache(cache: Path, size: int, index: FeatureIndex) -> None:
    import faiss

    cache.mkdir(parents=True, exist_ok=True)
    codes, where = _cache_paths(cache, size)
    faiss.write_index_binary(index.index, str(codes))
    np.savez(where, counts=np.array([len(a) for a in index.xy]), xy=np.concatenate(index.xy))


def _load_cache(cache: Path, size: int) -> FeatureIndex | None:
    import faiss

    codes, where = _cache_paths(cache, size)
    if not (codes.exists() and where.exists()):
        return None
    stored = np.load(where)
    xy = np.split(stored["xy"], np.cumsum(stored["counts"])[:-1])
    return FeatureIndex(faiss.read_index_binary(str(codes)), xy)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=30, help="query printings per degradation")
    parser.add_argument("--reference", type=int, default=600, help="illustrations in the brute-force subset")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--neighbours", type=int, default=0, help="stored neighbours per query descriptor (0: by library size)"
    )
    parser.add_argument("--nprobe", type=int, default=feature_index.NPROBE, help="inverted lists probed")
    parser.add_argument("--candidates", type=int, default=feature_index.CANDIDATES, help="verified per query")
    parser.add_argument(
        "--cache", type=Path, help="keep the extracted features and the built index here, reused by a later run"
    )
    args = parser.parse_args()

    feature_index.K = args.neighbours
    feature_index.FeatureIndex.__init__.__defaults__ = (args.nprobe,)  # built by build_index with the default
    feature_index.CANDIDATES = args.candidates
    feature_index.FeatureIndex.candidates.__defaults__ = (None, args.candidates)

    size = args.size
    lib = library(size)
    blocks: dict[int, set[int]] = {}
    for ill in lib:
        blocks.setdefault(ill.block, set()).add(ill.number)
    print(
        f"library: {size} illustrations, {sum(i.kind == 'printing' for i in lib)} printings of "
        f"{len({i.block for i in lib if i.kind == 'printing'})} reused blocks, {sum(i.kind == 'recut' for i in lib)} "
        f"recuts; {args.workers} workers; machine load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )

    cached = _load_cache(args.cache, size) if args.cache else None
    if cached is not None:
        index = cached
        kind = type(index.index).__name__
        print(f"index: loaded from {args.cache} (indexing figures: see the run that built it)")
    else:
        index, kind = _build(lib, size, args)
        if args.cache:
            _save_cache(args.cache, size, index)
    if hasattr(index.index, "nprobe"):
        index.index.nprobe = args.nprobe

    # queries on the whole library
    queries = _query_set(lib, args.queries, 1)
    rows: dict[str, list[tuple[float, int, int, float, float]]] = {h: [] for h in DEGRADATIONS}
    recut_flagged = 0
    pictures = {(q.number, how): degrade(q, size, how) for q in queries for how in DEGRADATIONS}
    for (qn, how), picture in pictures.items():
        truth = blocks[lib[qn].block]
        recut = blocks.get(size + lib[qn].block, set())
        t, c = time.perf_counter(), time.process_time()
        found = same_block(index.candidates(extract(picture, QUERY_SIDE, QUERY_KEYPOINTS)))
        wall, qcpu = time.perf_counter() - t, time.process_time() - c
        numbers = [f.number for f in found]
        recut_flagged += len(recut & set(numbers))
        rows[how].append((*_score(numbers, truth), wall, qcpu))
    _report(f"local features + {kind}, {size} illustrations, {len(queries)} queries per degradation", rows)
    print(f"recut copies flagged same_block: {recut_flagged}")

    # the former method, beside the new one, on a subset holding the query blocks' printings
    if args.reference:
        sub_q = queries[: max(1, min(len(queries), args.reference // 60))]
        members = sorted({n for q in sub_q for n in blocks[q.block] | blocks.get(size + q.block, set())})
        rest = [n for n in range(size) if n not in set(members)]
        members += random.Random(2).sample(rest, max(0, min(len(rest), args.reference - len(members))))
        at = {n: k for k, n in enumerate(members)}
        with ProcessPoolExecutor(args.workers) as pool:
            thumbs = [Image.fromarray(a) for a in pool.map(_thumb, [(lib[n], size) for n in members], chunksize=16)]
            subfeats = [
                Features(xy, d, (0, 0))
                for xy, d, _ in pool.map(_index_one, [(lib[n], size) for n in members], chunksize=16)
            ]
        sub_desc = sum(len(f.desc) for f in subfeats)
        sub_train = np.concatenate([f.desc for f in subfeats]) if sub_desc > FLAT_UNTIL else None
        sub_index = build_index([subfeats], sub_desc, sub_train)
        c0 = time.process_time()
        boxes, qboxes = ref.stored_boxes(), ref.query_boxes()
        hashes = np.concatenate([ref.window_hashes(t, boxes) for t in thumbs])
        owner = np.repeat(np.arange(len(members)), len(boxes))
        hash_cpu = (time.process_time() - c0) / len(members)
        old_rows: dict[str, list[tuple[float, int, int, float, float]]] = {h: [] for h in DEGRADATIONS}
        new_rows: dict[str, list[tuple[float, int, int, float, float]]] = {h: [] for h in DEGRADATIONS}
        for q in sub_q:
            truth = {at[n] for n in blocks[q.block]}
            for how in DEGRADATIONS:
                picture = pictures[(q.number, how)]
                t, c = time.perf_counter(), time.process_time()
                found = _old_search(picture, hashes, owner, len(members), thumbs, boxes, qboxes)
                old_rows[how].append((*_score(found, truth), time.perf_counter() - t, time.process_time() - c))
                t, c = time.perf_counter(), time.process_time()
                new = [
                    f.number for f in same_block(sub_index.candidates(extract(picture, QUERY_SIDE, QUERY_KEYPOINTS)))
                ]
                new_rows[how].append((*_score(new, truth), time.perf_counter() - t, time.process_time() - c))
        print(f"\nreference subset: {len(members)} illustrations, {len(sub_q)} queries per degradation")
        print(
            f"pHash windows: {hash_cpu * 1000:.0f} ms CPU per illustration to hash, "
            f"{hashes.nbytes / len(members) / 1024:.1f} KiB each"
        )
        _report("former pHash-window brute force + pixel verification (subset)", old_rows)
        _report("local features (same subset, same queries)", new_rows)


def _old_search(
    picture: Image.Image,
    hashes: np.ndarray,
    owner: np.ndarray,
    count: int,
    thumbs: list[Image.Image],
    boxes: list[tuple[float, float, float, float]],
    qboxes: list[tuple[float, float, float, float]],
) -> list[int]:
    """The former ``same_block``: window hashes, closest pairs by brute force, then pixel correlation of the 40 best."""
    small = picture.copy()
    small.thumbnail((400, 400))
    query = ref.window_hashes(small, qboxes)
    dist, qwin, srow = ref.best_pairs(query, hashes, owner, count)
    order = [int(n) for n in np.argsort(dist[:, 0], kind="stable") if dist[n, 0] <= ref.SAME_BLOCK_BITS][:40]
    out = []
    windows = len(boxes)
    for n in order:
        pairs = [(qboxes[int(qwin[n, k])], boxes[int(srow[n, k]) - n * windows]) for k in range(3) if srow[n, k] >= 0]
        best = max(ref.correlation(small, qb, thumbs[n], sb) for qb, sb in pairs)
        if best >= ref.SAME_BLOCK_CORRELATION:
            out.append((best, n))
    return [n for _, n in sorted(out, reverse=True)]


if __name__ == "__main__":
    main()
