"""Where search by image loses the true printings of a query, on an index cached by ``benchmarks/image_search.py``.

Usage: .venv/bin/python benchmarks/image_search_losses.py --size 10000 --cache DIR [--queries 10]
       [--how crop33,crop50] [--rematch 100]

For every true printing of every query (the same library and queries as ``image_search.py``): listed in
``same_block``, never verified (not among the candidates by votes), verified with fewer than 12 pairs in the loose
similarity fit, verified with fewer than 12 in the tight fit, or dropped by the fifth-of-the-best rule.

For crops (``crop50``, ``crop33``), where the generator says exactly which stored pixel each query pixel shows
(``fixtures.woodcuts.crop_box``, ``to_block``): the *true pairs* (a query keypoint whose nearest descriptor among
the printing's own lies within 3 px of where the query keypoint falls), their Hamming distance, how many of them the
index search returns among each query descriptor's neighbours (at the library's K and at 4 K), and the distance of
the K-th neighbour. The stored descriptors are read back from the faiss inverted lists.

``--rematch N``: an experiment, not the service's method: each of the N best-voted candidates is verified again on
keypoint pairs made by matching the query against that candidate's own descriptors (two nearest each), not against
the index's neighbours.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.image_search import _load_cache, _query_set
from fixtures.woodcuts import QUERY_SCAN, Illustration, crop_box, degrade, from_block, library, to_block
from imagesvc.search import feature_index as fi
from imagesvc.search.features import STORED_SIDE, Features, extract
from imagesvc.search.match_params import DEFAULT as P

__all__ = ["main"]

TRUE_PX = 3.0  # a pair within this of the generator's ground truth (stored pixels) is a true pair


def _stored_descriptors(index: fi.FeatureIndex) -> tuple[np.ndarray, np.ndarray]:
    """Every stored descriptor, ordered by faiss id, and where each illustration's start (from the inverted lists)."""
    import faiss

    ivf = index.index
    if not isinstance(ivf, faiss.IndexBinaryIVF):
        raise SystemExit("needs a cached inverted file (a library above ~330 illustrations)")
    codes, ids = [], []
    for lst in range(ivf.nlist):
        n = ivf.invlists.list_size(lst)
        if n:
            codes.append(faiss.rev_swig_ptr(ivf.invlists.get_codes(lst), n * 32).copy().reshape(n, 32))
            ids.append(faiss.rev_swig_ptr(ivf.invlists.get_ids(lst), n).copy())
    all_ids = np.concatenate(ids)
    order = np.argsort(all_ids)
    owner = all_ids[order] >> fi.KP_BITS
    return np.concatenate(codes)[order], np.searchsorted(owner, np.arange(index.count + 1))


def _stage(number: int, found: dict[int, fi.Candidate], listed: set[int]) -> str:
    c = found.get(number)
    if number in listed:
        return "listed"
    if c is None:
        return "never verified"
    if c.loose < P.same_block_inliers:
        return "loose < 12"
    if c.inliers < P.same_block_inliers:
        return "tight < 12"
    return "fifth of the best"


def _true_pairs(
    lib: list[Illustration],
    size: int,
    q: Illustration,
    how: str,
    query: Features,
    picture_width: int,
    p: int,
    codes: np.ndarray,
    starts: np.ndarray,
    index: fi.FeatureIndex,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The true pairs of ``query`` with printing ``p``: query keypoint, stored keypoint, Hamming distance."""
    left, top, _, _ = crop_box(q, size, how)
    scan_xy = query.xy * (picture_width / query.size[0]) + [left, top]
    stored = lib[p]
    reduced = min(1.0, STORED_SIDE / stored.side)
    where = from_block(stored, size, stored.side, to_block(q, size, QUERY_SCAN, scan_xy)) * reduced
    desc = codes[starts[p] : starts[p + 1]]
    ham = fi.hamming(query.desc[:, None, :], desc[None, :, :])
    nearest, dist = ham.argmin(1), ham.min(1)
    off = np.hypot(*(index.xy[p][nearest].astype(np.float32) - where).T)
    true = np.nonzero((off < TRUE_PX) & (dist <= P.max_hamming))[0]
    return true, nearest[true], dist[true]


def _rematch(index: fi.FeatureIndex, query: Features, desc: np.ndarray, number: int) -> int:
    """Tight inliers of ``number`` on pairs made against its own descriptors (two nearest per query descriptor)."""
    import cv2

    matches = cv2.BFMatcher(cv2.NORM_HAMMING).knnMatch(query.desc, desc, k=2)
    pairs = [(m.queryIdx, m.trainIdx) for two in matches for m in two if m.distance <= P.max_hamming]
    if len(pairs) < P.min_pairs:
        return 0
    qi, kp = np.array(pairs).T
    src, dst = query.xy[qi], index.xy[number][kp].astype(np.float32)
    loose, _, transform = fi._ransac(src, dst, query.size, P)
    if loose < P.same_block_inliers or transform is None:
        return 0
    near = np.hypot(*(src @ transform[:, :2].T + transform[:, 2] - dst).T) <= 2 * P.ransac_px
    scale = float(np.hypot(transform[0, 0], transform[1, 0]))
    return fi._tight(src[near], dst[near], P.tight_px * max(1.0, scale))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--cache", type=Path, required=True, help="the --cache of a benchmarks/image_search.py run")
    parser.add_argument("--queries", type=int, default=10)
    parser.add_argument("--how", default="crop33,crop50")
    parser.add_argument("--rematch", type=int, default=0, help="re-verify the N best voted on their own descriptors")
    args = parser.parse_args()

    size = args.size
    lib = library(size)
    index = _load_cache(args.cache, size)
    if index is None:
        raise SystemExit(f"no cached index of {size} illustrations under {args.cache}: run image_search.py --cache")
    blocks: dict[int, list[int]] = {}
    for ill in lib:
        blocks.setdefault(ill.block, []).append(ill.number)
    codes, starts = _stored_descriptors(index)
    k = P.neighbours_for(index.count)
    print(f"{size} illustrations, {index.descriptors:,} descriptors, K = {k}, nprobe {index.index.nprobe}")
    for how in args.how.split(","):
        stages: Counter[str] = Counter()
        true_n, found_k, found_4k, true_dist, kth = 0, 0, 0, [], []
        recall, remat_recall, remat_wrong, cpu = [], [], 0, []
        for q in _query_set(lib, args.queries, 1):
            picture = degrade(q, size, how)
            truth = set(blocks[q.block])
            t = time.process_time()
            query = extract(picture, P.query_side, P.query_keypoints)
            candidates = index.candidates(query)
            listed = fi.same_block(candidates, P)
            cpu.append(time.process_time() - t)
            by_number = {c.number: c for c in candidates}
            stages.update(_stage(n, by_number, {c.number for c in listed}) for n in truth)
            recall.append(len(truth & {c.number for c in listed[:10]}) / min(10, len(truth)))
            if how in ("crop50", "crop33"):
                dist, hits = index.index.search(query.desc, 4 * k)
                for p in truth:
                    qi, kp, d = _true_pairs(lib, size, q, how, query, picture.width, p, codes, starts, index)
                    wanted = (np.int64(p) << fi.KP_BITS) | kp
                    true_n += len(qi)
                    found_k += int((hits[qi, :k] == wanted[:, None]).any(1).sum())
                    found_4k += int((hits[qi] == wanted[:, None]).any(1).sum())
                    true_dist.extend(d.tolist())
                    kth.extend(dist[qi, k - 1].tolist())
            if args.rematch:
                voted = sorted(candidates, key=lambda c: -c.votes)[: args.rematch]
                scored = sorted(
                    (
                        (_rematch(index, query, codes[starts[c.number] : starts[c.number + 1]], c.number), c.number)
                        for c in voted
                    ),
                    reverse=True,
                )
                best = scored[0][0] if scored else 0
                again = [n for s, n in scored if s >= P.same_block_inliers and s >= P.same_block_ratio * best]
                remat_recall.append(len(truth & set(again[:10])) / min(10, len(truth)))
                remat_wrong += len(set(again) - truth)
        total = sum(stages.values())
        print(
            f"\n{how}: recall@10 {np.mean(recall):.3f}, p95 CPU {np.percentile(cpu, 95) * 1000:.0f} ms; "
            f"true printings ({total}): " + ", ".join(f"{s} {n}" for s, n in stages.most_common())
        )
        if true_n:
            print(
                f"  true pairs {true_n} ({true_n / total:.1f} per printing), median Hamming "
                f"{np.median(true_dist):.0f}; returned among K = {k} neighbours: {found_k / true_n:.2f}, among "
                f"{4 * k}: {found_4k / true_n:.2f}; median distance of the K-th neighbour {np.median(kth):.0f}"
            )
        if args.rematch:
            print(
                f"  re-matched on the {args.rematch} best voted: recall@10 {np.mean(remat_recall):.3f}, "
                f"other illustrations listed {remat_wrong}"
            )


if __name__ == "__main__":
    main()
