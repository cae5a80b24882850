"""Search by image at size: recall@10 of the true printings per degradation, ``same_block`` precision, query latency,
index memory and indexing CPU per illustration, over a generated library of woodcut-like illustrations
(``fixtures/woodcuts.py``), beside the former pHash-window brute force on a subset measured in the same run.

Usage: python3 benchmarks/image_search.py [--size 20000] [--queries 30] [--skip 0] [--degradations crop33,...]
       [--reference 600] [--workers N] [--by-pairs 200] [--by-place 200]
       [--preselect 4000]
       [--neighbours 0] [--nprobe 8] [--candidates 400] [--coarser 2,4] [--guided 20] [--expand 1]
       [--corroborate 1] [--cache DIR]

Needs numpy, Pillow, opencv-python-headless and faiss-cpu only (nothing of the service's serving stack), so it runs
on a bare many-core machine. Stages, each timed (CPU per illustration and wall):

- *generate* and *extract*, together on ``--workers`` processes, ``SHARD`` illustrations a task: each stored
  illustration rendered and saved as a JPEG at 600-1,000 px (generation, not part of indexing), then decoded
  reduced and its ORB features extracted, as ``imagesvc index`` does. Each task writes a features file under
  ``DIR/shards-<size>/`` (a temporary folder without ``--cache``); a killed run resumes at the missing shards.
- *train* (the inverted file's centroids, on a sample of shards) and *add* (every shard), faiss on ``--workers``
  threads; the built index is saved under ``DIR`` and a later run with the same ``--size`` only queries.
- *queries*: the degraded pictures made on the workers, then each query run on one core (faiss held to one thread),
  as a serving node runs each (``FeatureIndex.search``: candidates, guided matching, expansion); latency is wall time
  of extraction + search + verification, with CPU time beside it (on a shared machine CPU time is the steadier
  figure). ``--guided 0 --expand 0`` measures the method without its guided matching and expansion (format v2's).
"""

from __future__ import annotations

import argparse
import io
import itertools
import multiprocessing
import os
import random
import resource
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import phash_reference as ref
from fixtures.woodcuts import DEGRADATIONS, Illustration, degrade, library, render
from imagesvc.search import feature_index, features
from imagesvc.search.block_index import write_rows
from imagesvc.search.feature_index import FLAT_UNTIL, FeatureIndex, build_index
from imagesvc.search.features import STORED_SIDE, Features, decode_reduced, extract, extract_query
from imagesvc.search.match_params import DEFAULT, DISTANCES, MatchParams

__all__ = ["main"]


SHARD = 500  # illustrations per features file of the cache: the unit of work of a worker, and of resuming


def _stored_jpeg(ill: Illustration, size: int) -> bytes:
    buf = io.BytesIO()
    render(ill, size).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def _index_one(args: tuple[Illustration, int, int]) -> tuple[Features, float]:
    """Worker: render the stored JPEG (not counted), then decode reduced + extract (counted, CPU seconds)."""
    ill, size, patch = args
    data = _stored_jpeg(ill, size)
    t = time.process_time()
    f = extract(decode_reduced(data, STORED_SIDE), patch=patch)
    return Features(f.xy, f.desc, (0, 0), _shape(f), fine=f.fine), time.process_time() - t


def _shape(f: Features) -> np.ndarray:
    return f.shape if f.shape is not None else np.zeros((len(f.xy), 2), np.uint8)


@lru_cache(maxsize=2)
def _library(size: int) -> list[Illustration]:
    return library(size)


def _shard(args: tuple[int, int, str, int]) -> tuple[int, float, float]:
    """Worker: generate (render + JPEG) and extract the illustrations of shard ``k`` of a library of ``size``, with
    descriptors of ``patch`` px, write them to ``path`` (atomically: a killed run leaves no half shard); CPU seconds
    of each stage."""
    size, k, path, patch = args
    gen = ext = 0.0
    xy, desc, shape, fine = [], [], [], []
    for ill in _library(size)[k * SHARD : (k + 1) * SHARD]:
        t0 = time.process_time()
        data = _stored_jpeg(ill, size)
        t1 = time.process_time()
        f = extract(decode_reduced(data, STORED_SIDE), patch=patch)
        gen, ext = gen + t1 - t0, ext + time.process_time() - t1
        xy.append(f.xy.astype(np.float16))
        desc.append(f.desc)
        shape.append(_shape(f))
        fine.append(f.fit_desc)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as out:
        np.savez(
            out,
            counts=np.array([len(a) for a in xy], np.int32),
            xy=np.concatenate(xy),
            desc=np.concatenate(desc),
            shape=np.concatenate(shape),
            fine=np.concatenate(fine),
            cpu=np.array([gen, ext]),
        )
    os.replace(tmp, path)
    return k, gen, ext


def _read_shard(path: Path) -> dict[str, np.ndarray]:
    with open(path, "rb") as f, np.load(f) as data:
        return {name: data[name] for name in data.files}


def _complete(shard: Path, patch: int) -> bool:
    """Whether ``shard`` was written, with the fits' descriptors where they are of their own patch (a shard of an
    earlier version has none: made again)."""
    if not shard.exists():
        return False
    if patch == features.FIT_PATCH:
        return True
    with open(shard, "rb") as f, np.load(f) as data:
        return "fine" in data.files


def _features(size: int, folder: Path, workers: int, patch: int) -> tuple[list[Path], float, float, float]:
    """Every shard of the library's features under ``folder``, made on ``workers`` processes where missing (a run
    killed midway resumes at the shards it had not written); CPU seconds of generation and of extraction summed over
    all shards (those of an earlier run included), and the wall time of this run's part."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{k:05d}.npz" for k in range((size + SHARD - 1) // SHARD)]
    todo = [(size, k, str(p), patch) for k, p in enumerate(paths) if not _complete(p, patch)]
    started = time.perf_counter()
    if todo:
        print(f"features: {len(paths) - len(todo)} of {len(paths)} shards cached, making {len(todo)}", flush=True)
        with ProcessPoolExecutor(workers) as pool:
            for done, _ in enumerate(pool.map(_shard, todo), 1):
                if done % max(1, len(todo) // 10) == 0:
                    print(f"  {done}/{len(todo)} shards, {time.perf_counter() - started:.0f}s", flush=True)
    wall = time.perf_counter() - started
    gen = ext = 0.0
    for p in paths:
        with open(p, "rb") as f, np.load(f) as data:
            g, e = data["cpu"]
        gen, ext = gen + float(g), ext + float(e)
    return paths, gen, ext, wall


def _degrade(args: tuple[Illustration, int, str]) -> Image.Image:
    return degrade(*args)


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


def _build(size: int, args: argparse.Namespace, folder: Path, params: MatchParams) -> tuple[FeatureIndex, str]:
    """Indexing as ``imagesvc index`` does it, timed by stage: generation and features on all workers (resumable
    shards under ``folder``), then the faiss index trained on a sample and filled shard by shard."""
    import faiss

    rss0 = _rss_mb()
    paths, gen_cpu, ext_cpu, ext_wall = _features(size, folder, args.workers, params.patch)
    total = 0
    for p in paths:
        with open(p, "rb") as f, np.load(f) as data:
            total += int(data["counts"].sum())
    faiss.omp_set_num_threads(args.workers)
    t0, c0 = time.perf_counter(), time.process_time()
    train = None
    if total > FLAT_UNTIL:  # a sample of whole shards, spread over the library
        want = feature_index._nlist(total) * feature_index.TRAIN_PER_LIST
        step = max(1, total // want)  # every step-th shard holds about the sample
        train = np.concatenate([_read_shard(p)["desc"] for p in paths[::step]])[:want]
    train_wall, train_cpu = time.perf_counter() - t0, time.process_time() - c0

    trained: list[float] = []  # when build_index asks for the first batch: its training is done

    def batches() -> Iterator[list[Features]]:
        trained.extend((time.perf_counter(), time.process_time()))
        for p in paths:
            d = _read_shard(p)
            starts = np.concatenate([[0], np.cumsum(d["counts"])])
            yield [
                Features(d["xy"][a:b], d["desc"][a:b], (0, 0), d["shape"][a:b]) for a, b in itertools.pairwise(starts)
            ]  # the fine descriptors are not in the faiss index: written beside it below

    t1, c1 = time.perf_counter(), time.process_time()
    index = build_index(batches(), total, train, params=params)
    # beside the index, memory-mapped, as ``imagesvc index`` keeps them (never all in memory at once)
    index.desc = write_rows(folder.parent / f".descriptors-{size}.npy", _shard_rows(paths, "desc"), total)
    if params.patch != features.FIT_PATCH:
        index.fine = write_rows(folder.parent / f".fine-{size}.npy", _shard_rows(paths, "fine"), total)
    add_wall, add_cpu = time.perf_counter() - trained[0], time.process_time() - trained[1]
    train_wall, train_cpu = train_wall + trained[0] - t1, train_cpu + trained[1] - c1
    faiss.omp_set_num_threads(1)
    kind = type(index.index).__name__
    print(
        f"indexing, CPU per illustration (wall of the stage): generate {gen_cpu / size * 1000:.1f} ms (render + JPEG, "
        f"not part of indexing), extract {ext_cpu / size * 1000:.1f} ms (decode reduced + ORB), both on "
        f"{args.workers} workers in {ext_wall:.0f}s; faiss {kind}: train {train_cpu / size * 1000:.1f} ms "
        f"({train_wall:.0f}s), add {add_cpu / size * 1000:.1f} ms ({add_wall:.0f}s), on {args.workers} threads; "
        f"indexing total {(ext_cpu + train_cpu + add_cpu) / size * 1000:.1f} ms"
    )
    print(
        f"index: {total:,} descriptors, {index.memory_bytes() / 2**20:.0f} MiB held "
        f"({index.memory_bytes() / size / 1024:.1f} KiB per illustration); descriptors kept beside it "
        f"{total * 32 * (1 + (index.fine is not None)) / 2**20:.0f} MiB on disk"
        f"{' (the fits too)' if index.fine is not None else ''}, memory-mapped; "
        f"process max RSS grew {_rss_mb() - rss0:.0f} MiB",
        flush=True,
    )
    return index, kind


def _shard_rows(paths: list[Path], name: str) -> Iterator[np.ndarray]:
    """Each shard's descriptors (``name``: ``desc``, or ``fine`` for the guided fits'), shard after shard."""
    for p in paths:
        with open(p, "rb") as f, np.load(f) as data:
            yield data[name]


def _cache_paths(cache: Path, size: int) -> tuple[Path, Path, Path, Path]:
    """The built index of a library of ``size``, its keypoints (with each keypoint's shape), its descriptors kept
    beside it (v3), and the guided fits' descriptors where those are of another patch."""
    return (
        cache / f"index-v3-{size}.faiss",
        cache / f"keypoints-v3-{size}.npz",
        cache / f"descriptors-v3-{size}.npy",
        cache / f"fine-v3-{size}.npy",
    )


def _save_cache(cache: Path, size: int, index: FeatureIndex) -> None:
    import faiss

    cache.mkdir(parents=True, exist_ok=True)
    codes, where, desc, fine = _cache_paths(cache, size)
    faiss.write_index_binary(index.index, str(codes))
    np.savez(where, counts=np.array([len(a) for a in index.xy]), xy=np.concatenate(index.xy), shape=index.shape)
    for rows, path in ((index.desc, desc), (index.fine, fine)):
        if isinstance(rows, np.memmap) and Path(str(rows.filename)).parent == cache:
            os.replace(str(rows.filename), path)  # written there by _build: renamed, the mapping stays valid
        elif rows is not None:
            np.save(path, rows)


def _load_cache(cache: Path, size: int, params: MatchParams = DEFAULT) -> FeatureIndex | None:
    import faiss

    codes, where, desc, fine = _cache_paths(cache, size)
    if not (codes.exists() and where.exists() and desc.exists()):
        return None
    wide = params.patch != features.FIT_PATCH
    if wide and not fine.exists():
        raise SystemExit(f"{cache} holds no {fine.name}: the guided fits' descriptors (made by a run of this version)")
    stored = np.load(where)
    xy = np.split(stored["xy"], np.cumsum(stored["counts"])[:-1])
    return FeatureIndex(
        faiss.read_index_binary(str(codes)),
        xy,
        params,
        shape=stored["shape"],
        desc=np.load(desc, mmap_mode="r"),
        fine=np.load(fine, mmap_mode="r") if wide else None,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=30, help="query printings per degradation")
    parser.add_argument("--skip", type=int, default=0, help="query printings passed over first (another query set)")
    parser.add_argument(
        "--degradations", default=",".join(DEGRADATIONS), help="comma-separated, of " + ", ".join(DEGRADATIONS)
    )
    parser.add_argument("--reference", type=int, default=600, help="illustrations in the brute-force subset")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--neighbours", type=int, default=0, help="stored neighbours per query descriptor (0: by library size)"
    )
    parser.add_argument("--nprobe", type=int, default=DEFAULT.nprobe, help="inverted lists probed")
    parser.add_argument("--candidates", type=int, default=DEFAULT.candidates, help="verified per query")
    parser.add_argument(
        "--preselect", type=int, default=DEFAULT.preselect, help="kept by total votes before the best bins"
    )
    parser.add_argument(
        "--by-pairs", type=int, default=DEFAULT.by_pairs, help="verified also for their pairs in the best bin"
    )
    parser.add_argument(
        "--by-place", type=int, default=DEFAULT.by_place, help="verified also for pairs agreeing on a place"
    )
    parser.add_argument(
        "--coarser",
        default=",".join(map(str, DEFAULT.coarser_levels)),
        help="pyramid steps of a small query's further looks, comma-separated (empty: none)",
    )
    parser.add_argument(
        "--patch",
        type=int,
        default=DEFAULT.patch,
        choices=sorted(DISTANCES),
        help="side of each descriptor's patch, px (MatchParams.patch; a --cache holds one patch's features)",
    )
    parser.add_argument(
        "--distances",
        help="MAX_HAMMING,SIGMA,GUIDED_HAMMING,STRONG_HAMMING instead of those chosen for the patch (an experiment)",
    )
    parser.add_argument(
        "--guided", type=int, default=DEFAULT.guided_candidates, help="matched again by position (0: none)"
    )
    parser.add_argument(
        "--expand-nprobe", type=int, default=DEFAULT.expand_nprobe, help="lists probed by expansion (0: --nprobe)"
    )
    parser.add_argument("--expand", type=int, default=DEFAULT.expand_from, help="expanded from (0: none)")
    parser.add_argument(
        "--corroborate",
        type=int,
        default=DEFAULT.corroborate_from,
        help="close candidates searched for a printing that corroborates them (0: none)",
    )
    parser.add_argument(
        "--cache", type=Path, help="keep the extracted features and the built index here, reused by a later run"
    )
    args = parser.parse_args()
    hows = [h for h in args.degradations.split(",") if h]
    if unknown := set(hows) - set(DEGRADATIONS):
        parser.error(f"unknown degradations {sorted(unknown)}: choose among {', '.join(DEGRADATIONS)}")

    distances = {}
    if args.distances:
        hamming, sigma, guided, strong = (float(v) for v in args.distances.split(","))
        distances = {"max_hamming": int(hamming), "sigma": sigma, "guided_hamming": int(guided)}
        distances["strong_hamming"] = int(strong)
    params = MatchParams.for_patch(
        args.patch,
        neighbours=args.neighbours,
        nprobe=args.nprobe,
        candidates=args.candidates,
        preselect=args.preselect,
        by_pairs=args.by_pairs,
        by_place=args.by_place,
        expand_nprobe=args.expand_nprobe,
        guided_candidates=args.guided,
        coarser_levels=tuple(int(n) for n in args.coarser.split(",") if n),
        expand_from=args.expand,
        corroborate_from=args.corroborate,
        **distances,
    )

    size = args.size
    lib = _library(size)  # before the workers fork: they inherit it
    blocks: dict[int, set[int]] = {}
    for ill in lib:
        blocks.setdefault(ill.block, set()).add(ill.number)
    print(
        f"library: {size} illustrations, {sum(i.kind == 'printing' for i in lib)} printings of "
        f"{len({i.block for i in lib if i.kind == 'printing'})} reused blocks, {sum(i.kind == 'recut' for i in lib)} "
        f"recuts; {args.workers} workers; machine load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
        f"guided {args.guided}, expand {args.expand}, corroborate {args.corroborate}"
    )

    if args.cache:  # a cache holds the features of one patch (one written before this was said: 19 px)
        said = args.cache / "patch.txt"
        text = said.read_text().strip() if said.exists() else ""
        held = int(text) if text.isdecimal() else (19 if any(args.cache.glob("*")) else args.patch)
        if held != args.patch:
            parser.error(f"{args.cache} holds features of a {held} px patch, not --patch {args.patch}")
        args.cache.mkdir(parents=True, exist_ok=True)
        said.write_text(str(args.patch))
    cached = _load_cache(args.cache, size, params) if args.cache else None
    if cached is not None:
        index = cached
        kind = type(index.index).__name__
        print(f"index: loaded from {args.cache} (indexing figures: see the run that built it)")
    else:
        with tempfile.TemporaryDirectory() as scratch:
            index, kind = _build(size, args, (args.cache or Path(scratch)) / f"shards-{size}", params)
        if args.cache:
            t = time.perf_counter()
            _save_cache(args.cache, size, index)
            print(f"index: saved to {args.cache} in {time.perf_counter() - t:.0f}s", flush=True)
    if hasattr(index.index, "nprobe"):
        index.index.nprobe = args.nprobe

    # queries on the whole library
    queries = _query_set(lib, args.skip + args.queries, 1)[args.skip :]
    rows: dict[str, list[tuple[float, int, int, float, float]]] = {h: [] for h in hows}
    recut_flagged = 0
    t = time.perf_counter()
    wanted = [(q.number, how) for q in queries for how in hows]
    with ProcessPoolExecutor(args.workers) as pool:
        made = pool.map(_degrade, [(lib[n], size, how) for n, how in wanted], chunksize=4)
        pictures = dict(zip(wanted, made, strict=True))
    print(f"queries: {len(pictures)} pictures made in {time.perf_counter() - t:.0f}s", flush=True)
    for (qn, how), picture in pictures.items():
        truth = blocks[lib[qn].block]
        recut = blocks.get(size + lib[qn].block, set())
        t, c = time.perf_counter(), time.process_time()
        found = index.search(extract_query(picture, params))
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
            subfeats = [f for f, _ in pool.map(_index_one, [(lib[n], size, args.patch) for n in members], chunksize=16)]
        sub_desc = sum(len(f.desc) for f in subfeats)
        sub_train = np.concatenate([f.desc for f in subfeats]) if sub_desc > FLAT_UNTIL else None
        sub_index = build_index([subfeats], sub_desc, sub_train, keep_desc=True, params=params)
        c0 = time.process_time()
        boxes, qboxes = ref.stored_boxes(), ref.query_boxes()
        hashes = np.concatenate([ref.window_hashes(t, boxes) for t in thumbs])
        owner = np.repeat(np.arange(len(members)), len(boxes))
        hash_cpu = (time.process_time() - c0) / len(members)
        old_rows: dict[str, list[tuple[float, int, int, float, float]]] = {h: [] for h in hows}
        new_rows: dict[str, list[tuple[float, int, int, float, float]]] = {h: [] for h in hows}
        # the brute force takes seconds a query: its queries run side by side on the workers (each on one core,
        # timed in its process), the hashes and thumbnails inherited from this process when the pool forks
        _REFERENCE.update(hashes=hashes, owner=owner, count=len(members), thumbs=thumbs, boxes=boxes, qboxes=qboxes)
        t = time.perf_counter()
        with ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("fork")) as pool:
            cases = [(q.number, how) for q in sub_q for how in hows]
            old = dict(zip(cases, pool.map(_old_timed, [pictures[c] for c in cases]), strict=True))
        print(f"reference: {len(cases)} brute-force queries in {time.perf_counter() - t:.0f}s", flush=True)
        for q in sub_q:
            truth = {at[n] for n in blocks[q.block]}
            for how in hows:
                picture = pictures[(q.number, how)]
                found, wall, cpu = old[(q.number, how)]
                old_rows[how].append((*_score(found, truth), wall, cpu))
                t, c = time.perf_counter(), time.process_time()
                new = [f.number for f in sub_index.search(extract_query(picture, params))]
                new_rows[how].append((*_score(new, truth), time.perf_counter() - t, time.process_time() - c))
        print(f"\nreference subset: {len(members)} illustrations, {len(sub_q)} queries per degradation")
        print(
            f"pHash windows: {hash_cpu * 1000:.0f} ms CPU per illustration to hash, "
            f"{hashes.nbytes / len(members) / 1024:.1f} KiB each"
        )
        _report("former pHash-window brute force + pixel verification (subset)", old_rows)
        _report("local features (same subset, same queries)", new_rows)


_REFERENCE: dict[str, object] = {}  # the brute force's stored hashes, set before its pool forks


def _old_timed(picture: Image.Image) -> tuple[list[int], float, float]:
    """Worker: the former ``same_block`` on ``picture`` against ``_REFERENCE``, with its wall and CPU seconds."""
    r = _REFERENCE
    t, c = time.perf_counter(), time.process_time()
    found = _old_search(picture, r["hashes"], r["owner"], r["count"], r["thumbs"], r["boxes"], r["qboxes"])  # type: ignore[arg-type]
    return found, time.perf_counter() - t, time.process_time() - c


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
