"""Near-duplicate grouping at the library's scale: 200,000 pHashes, spread out or with a dense cluster, beside
parsing and sorting the same 200,000 hashes (numpy) as the reference floor, measured in the same run.

The cluster case is what a real library holds: blank or near-blank plates and one woodcut printed thousands of times
give thousands of hashes within a few bits of each other, all sharing most bands.

Usage: .venv/bin/python benchmarks/duplicates.py [--rows 200000] [--cluster 20000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np

from imagesvc.search.duplicates import near_duplicate_groups

__all__ = ["main"]


def _best(repeat: int, work: object) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--cluster", type=int, default=20_000, help="hashes within 12 low bits of one value")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rng = random.Random(7)
    spread = [f"{rng.getrandbits(64):016x}" for _ in range(args.rows)]
    half = args.cluster // 2
    clustered = spread[: args.rows - args.cluster] + ["8000000000000000"] * half
    clustered += [f"{0x8000000000000000 | rng.getrandbits(12):016x}" for _ in range(args.cluster - half)]
    floor = _best(args.repeat, lambda: np.sort(np.array([int(h, 16) for h in spread], np.uint64)))
    print(f"{'case':<42} {'seconds':>8} {'/ floor':>8}")
    print(f"{'parse the hex and sort (numpy): the floor':<42} {floor:>8.3f} {1:>8.1f}")
    for name, hashes in (("spread: random pHashes", spread), (f"clustered: {args.cluster} near one value", clustered)):
        took = _best(args.repeat, lambda hashes=hashes: near_duplicate_groups(hashes))
        groups = int(near_duplicate_groups(hashes).max()) + 1
        print(f"{name:<42} {took:>8.3f} {took / floor:>8.1f}   ({groups} groups)")


if __name__ == "__main__":
    main()
