"""Which descriptor patch tells a small crop's strokes from their look-alikes: the true pairs of crops and how many
look-alike descriptors of other pictures lie nearer, per patch, on the generated library (no index is built).

    python benchmarks/descriptor_patch.py [--size 200000] [--queries 10] [--look-alikes 60] [--how crop33]
        [--patches 19,31,41,51] [--teblid 2.0,4.0]

For each query (a printing of a reused block, degraded by ``--how``: ``crop33`` or ``crop50``, whose every pixel the
generator places in the block) and each other printing of its block: the *true pairs*, a query keypoint and the
stored keypoint at the place it shows (within 3 px), at its orientation (within 20 degrees) and about the pyramid
levels the crop's enlargement implies (3 for a third of each side, 2 for a half, +-1), the nearest such twin per
query keypoint. Keypoints are found as ``features.extract`` and ``extract_query`` find them (ORB's own 19 px, spread
over the picture); each patch describes the same keypoints. The look-alikes: ``--look-alikes`` single printings of
the query's subject, described the same way.

Printed per patch: the true pairs' median Hamming distance, the fraction of the look-alikes' descriptors nearer to
the query descriptor than its twin (percentiles), and the share of true pairs with fewer than 1 in 10,000 nearer,
with the median count of such pairs per printing. That share is what an index can still return: at 200,000
illustrations a subject's 5,000 single printings hold 3 million descriptors, and a query descriptor's 256
neighbours are 1 in 12,000 of them. ``--teblid``: also OpenCV's TEBLID descriptor at these scale factors, where
``cv2.xfeatures2d`` exists (opencv-contrib-python-headless), for comparison only.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.image_search import _query_set, _stored_jpeg
from fixtures.woodcuts import QUERY_SCAN, crop_box, degrade, from_block, library, subject, to_block
from imagesvc.search import features
from imagesvc.search.feature_index import hamming
from imagesvc.search.match_params import DEFAULT

__all__ = ["main"]

LEVELS = {"crop33": 3, "crop50": 2}  # pyramid levels (1.2x each) a crop is shown larger than its printing stored
NEARER = 1e-4


def _describers(patches: list[int], teblid: list[float]) -> dict[str, Any]:
    import cv2

    out: dict[str, Any] = {f"ORB, {p} px": features._orb(1, p) for p in patches}
    for scale in teblid:
        if not hasattr(cv2, "xfeatures2d"):
            print("--teblid: this OpenCV has no xfeatures2d (opencv-contrib-python-headless): left out")
            break
        out[f"TEBLID x{scale}"] = cv2.xfeatures2d.TEBLID_create(scale, cv2.xfeatures2d.TEBLID_SIZE_256_BITS)
    return out


def _keypoints(grey: np.ndarray, n: int) -> list:
    return features._spread(list(features._orb(n * 4).detect(grey, None)), n, (grey.shape[1], grey.shape[0]))


def _place(k: Any) -> tuple[float, float, int]:
    return round(k.pt[0], 3), round(k.pt[1], 3), k.octave


def _describe(describers: dict[str, Any], grey: np.ndarray, kps: list) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per describer: a descriptor row per keypoint of ``kps`` and whether it was described (not dropped)."""
    out = {}
    for name, describer in describers.items():
        got, desc = describer.compute(grey, list(kps))
        rows, ok = np.zeros((len(kps), 32), np.uint8), np.zeros(len(kps), bool)
        where = {_place(k): i for i, k in enumerate(kps)}
        for k, row in zip(got or [], desc if desc is not None else [], strict=True):
            i = where.get(_place(k))
            if i is not None:
                rows[i], ok[i] = row, True
        out[name] = (rows, ok)
    return out


def _stored(ill: Any, size: int, describers: dict[str, Any]) -> tuple[list, dict[str, tuple[np.ndarray, np.ndarray]]]:
    grey = features.grey_reduced(
        features.decode_reduced(_stored_jpeg(ill, size), features.STORED_SIDE), features.STORED_SIDE
    )
    kps = _keypoints(grey, features.STORED_KEYPOINTS)
    return kps, _describe(describers, grey, kps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=200_000)
    parser.add_argument("--queries", type=int, default=10)
    parser.add_argument("--look-alikes", type=int, default=60, help="single printings of the query's subject")
    parser.add_argument("--how", default="crop33", choices=sorted(LEVELS))
    parser.add_argument("--patches", default="19,31,41,51", help="ORB patch sides, px, comma-separated")
    parser.add_argument("--teblid", default="", help="TEBLID scale factors, comma-separated (needs xfeatures2d)")
    args = parser.parse_args()
    import cv2

    cv2.setNumThreads(1)
    describers = _describers(
        [int(p) for p in args.patches.split(",") if p], [float(s) for s in args.teblid.split(",") if s]
    )
    lib = library(args.size)
    blocks: dict[int, list[int]] = {}
    singles: dict[int, list[Any]] = {}
    for ill in lib:
        if ill.kind == "printing":
            blocks.setdefault(ill.block, []).append(ill.number)
        elif ill.kind == "single" and len(singles.setdefault(subject(ill.block, args.size), [])) < args.look_alikes:
            singles[subject(ill.block, args.size)].append(ill)
    rows: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {name: [] for name in describers}
    started = time.perf_counter()
    for q in _query_set(lib, args.queries, 1):
        picture = degrade(q, args.size, args.how)
        grey = features.grey_reduced(picture, DEFAULT.query_side)
        qk = _keypoints(grey, DEFAULT.query_keypoints)
        qd = _describe(describers, grey, qk)
        left, top, _, _ = crop_box(q, args.size, args.how)
        uv = to_block(
            q,
            args.size,
            QUERY_SCAN,
            np.array([k.pt for k in qk], np.float32) * (picture.width / grey.shape[1]) + [left, top],
        )
        pool: dict[str, list[np.ndarray]] = {name: [] for name in describers}
        for ill in singles[subject(q.block, args.size)]:
            for name, (desc, ok) in _stored(ill, args.size, describers)[1].items():
                pool[name].append(desc[ok])
        look_alikes = {name: np.concatenate(parts) for name, parts in pool.items()}
        for number in blocks[q.block]:
            if number == q.number:
                continue
            ill = lib[number]
            sk, sd = _stored(ill, args.size, describers)
            where = from_block(ill, args.size, ill.side, uv) * min(1.0, features.STORED_SIDE / ill.side)
            at, on = features.near_pairs(where.astype(np.float32), np.array([k.pt for k in sk], np.float32), 3.0)
            turn = np.array([(qk[a].angle - sk[o].angle + 180) % 360 - 180 for a, o in zip(at, on, strict=True)])
            levels = np.array([qk[a].octave - sk[o].octave for a, o in zip(at, on, strict=True)])
            twins = (np.abs(turn) < 20) & (np.abs(levels - LEVELS[args.how]) <= 1) if len(at) else np.zeros(0, bool)
            at, on = at[twins], on[twins]
            for name in describers:
                (qdesc, qok), (sdesc, sok) = qd[name], sd[name]
                both = qok[at] & sok[on]
                a, o = at[both], on[both]
                apart = hamming(qdesc[a], sdesc[o])
                firsts = np.unique(a)
                nearest = np.array([apart[a == k].min() for k in firsts], np.int32)
                nearer = np.array(
                    [(hamming(qdesc[k], look_alikes[name]) < d).mean() for k, d in zip(firsts, nearest, strict=True)]
                )
                rows[name].append((nearest, nearer))
        print(f"  query {q.number} done, {time.perf_counter() - started:.0f}s", flush=True)

    print(
        f"\n{args.how}, {args.queries} queries of a {args.size:,}-illustration library, {args.look_alikes} "
        f"look-alikes each ({sum(len(v) for v in singles.values()) // max(1, len(singles))} kept a subject)"
    )
    print(
        "| descriptor | true pairs | median bits | look-alikes nearer, p25 / p50 / p75 | under 1 in 10,000 nearer "
        "| such pairs a printing (median) | their bits p50 / p90 |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, found in rows.items():
        dist = np.concatenate([d for d, _ in found]) if found else np.zeros(0)
        nearer = np.concatenate([n for _, n in found]) if found else np.zeros(0)
        if not len(dist):
            print(f"| {name} | 0 | | | | | |")
            continue
        good = dist[nearer < NEARER]
        per = [int((n < NEARER).sum()) for _, n in found]
        p25, p50, p75 = np.percentile(nearer, [25, 50, 75])
        bits = f"{np.median(good):.0f} / {np.percentile(good, 90):.0f}" if len(good) else "-"
        print(
            f"| {name} | {len(dist)} | {np.median(dist):.0f} | {p25:.1e} / {p50:.1e} / {p75:.1e} "
            f"| {(nearer < NEARER).mean():.3f} | {np.median(per):.0f} | {bits} |"
        )


if __name__ == "__main__":
    main()
