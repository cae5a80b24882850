"""An experiment, not the service's method: a search-by-image index without its *hubs*, the stored descriptors
that are among the nearest neighbours of many others (look-alike strokes: frame corners, hatching), as a visual
vocabulary drops its stop words.

    python benchmarks/image_search_hubs.py --size 200000 --cache DIR --out DIR2 [--sample 1000000] [--at-least 4]
    python benchmarks/image_search.py --size 200000 --cache DIR2 --reference 0 --degradations crop33,crop50

A sample of the stored descriptors (``--sample``, chosen at random) is searched in the index of a
``benchmarks/image_search.py --cache`` as a query's descriptors are (the library's neighbours a descriptor,
within 40 bits, the index's 8 lists probed); every stored descriptor counts how often it comes back for a sampled
one other than itself. Those counted ``--at-least`` times are removed from the inverted lists, and the index is
written under ``--out`` beside links to the cache's keypoints and descriptors, so that ``image_search.py`` can be
run on it as it is. Printed: the counts' percentiles and the share removed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.image_search import _cache_paths
from imagesvc.search import feature_index as fi

__all__ = ["main"]

BATCH = 50_000  # sampled descriptors a search


def _counts(index: object, desc: np.ndarray, starts: np.ndarray, sample: int, k: int) -> np.ndarray:
    """How often each stored descriptor (by its row in ``desc``) is among the ``k`` nearest of ``sample`` others."""
    rows = np.sort(np.random.default_rng(7).choice(len(desc), sample, replace=False))
    hub = np.zeros(len(desc), np.int32)
    started = time.monotonic()
    for at in range(0, sample, BATCH):
        mine = rows[at : at + BATCH]
        dist, hits = index.search(np.ascontiguousarray(desc[mine]), k)  # type: ignore[attr-defined]
        ok = (hits >= 0) & (dist <= fi.MAX_HAMMING)
        found = hits[ok]
        row = starts[found >> fi.KP_BITS] + (found & ((1 << fi.KP_BITS) - 1))
        row = row[row != np.repeat(mine, ok.sum(1))]  # a descriptor finds itself: no count
        hub += np.bincount(row, minlength=len(desc)).astype(np.int32)
        print(f"  {at + len(mine):,} sampled, {time.monotonic() - started:.0f} s", flush=True)
    return hub


def main() -> None:
    import faiss

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--cache", type=Path, required=True, help="the --cache of a benchmarks/image_search.py run")
    parser.add_argument("--out", type=Path, required=True, help="where the index without its hubs is written")
    parser.add_argument("--sample", type=int, default=1_000_000)
    parser.add_argument("--at-least", type=int, default=4, help="a descriptor counted this often is removed")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()

    codes, where, descriptors = _cache_paths(args.cache, args.size)
    index = faiss.read_index_binary(str(codes))
    index.nprobe = fi.NPROBE
    faiss.omp_set_num_threads(args.threads)
    desc = np.load(descriptors, mmap_mode="r")
    starts = np.concatenate([[0], np.cumsum(np.load(where)["counts"])]).astype(np.int64)
    hub = _counts(index, desc, starts, min(args.sample, len(desc)), fi.neighbours(args.size))
    print("counts, percentiles 50 / 80 / 90 / 95 / 99:", *np.percentile(hub, [50, 80, 90, 95, 99]))

    rows = np.nonzero(hub >= args.at_least)[0]
    owner = np.searchsorted(starts, rows, side="right") - 1
    ids = (owner.astype(np.int64) << fi.KP_BITS) | (rows - starts[owner])
    bitmap = np.zeros(((args.size << fi.KP_BITS) + 7) // 8, np.uint8)
    np.bitwise_or.at(bitmap, ids >> 3, (1 << (ids & 7)).astype(np.uint8))
    removed = index.remove_ids(faiss.IDSelectorBitmap(len(bitmap) * 8, faiss.swig_ptr(bitmap)))
    print(f"removed {removed:,} of {len(desc):,} descriptors ({removed / len(desc):.1%}), counted {args.at_least}+")

    args.out.mkdir(parents=True, exist_ok=True)
    out_codes, out_where, out_desc = _cache_paths(args.out, args.size)
    faiss.write_index_binary(index, str(out_codes))
    for mine, theirs in ((out_where, where), (out_desc, descriptors)):
        if not mine.exists():
            mine.symlink_to(theirs.resolve())
    print(f"written under {args.out}")


if __name__ == "__main__":
    main()
