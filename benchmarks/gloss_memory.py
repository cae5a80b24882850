"""What the query lexicons keep in a serving worker (imagesvc/search/glosses.py, and the spelling step's English word
list they read): for each of Latin, Hebrew, Italian, Arabic and all four together, the Python memory still allocated
after the load (tracemalloc), the growth of the process's resident memory, the load's wall and CPU time, and the mean
CPU time of one ``Glossary.gloss`` (one thread) over the evaluation queries of that language.

    python benchmarks/gloss_memory.py [--runs 5] [--rounds 20] [--rows en,la,he,it,ar,all]

Every figure comes from a fresh process (the median of ``--runs``), as a worker starts: the web app's modules
imported, the English word list read first as a node reads it for its first query (its own row: ``en``), then the
lexicon. Resident memory and times are measured in a process without tracemalloc, whose own bookkeeping would inflate
both; retained memory in another, with tracemalloc started just before the load. RSS is read after ``gc.collect()``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROWS = ("en", "la", "he", "it", "ar", "all")
SETS = ("search_eval_languages.json", "search_eval_languages_heldout.json", "search_eval.json")

# run in a child: argv[1] the row, argv[2] "trace" or "time", argv[3] rounds; prints one JSON object
CHILD = """
import gc, json, sys, time, tracemalloc
from pathlib import Path
import imagesvc.app  # noqa: F401 (what a serving worker has imported before its lexicons load)
from imagesvc.search import glosses, spelling

def rss():
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20

row, mode, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
codes = glosses.LANGUAGES if row == "all" else (row,)
if row != "en":
    spelling.english_word("warm")
gc.collect()
if mode == "trace":
    tracemalloc.start()
before, started, cpu = rss(), time.perf_counter(), time.process_time()
glossary = glosses.Glossary(codes if row != "en" else ())
if row == "en":
    spelling.english_word("warm")
else:
    glossary.load()
seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
gc.collect()
out = {"rss": rss() - before, "seconds": seconds, "cpu": cpu}
if mode == "trace":
    out["retained"] = tracemalloc.get_traced_memory()[0] / 2**20
elif row != "en":
    queries = json.loads(sys.stdin.read())
    started = time.process_time()
    for _ in range(rounds):
        for query in queries:
            glossary.gloss(query)
    out["gloss_us"] = (time.process_time() - started) / (rounds * len(queries)) * 1e6
print(json.dumps(out))
"""


def eval_queries(row: str) -> list[str]:
    """The queries of ``row``'s language in both cross-lingual sets; for ``all``, every query of the three sets."""
    out: list[str] = []
    for name in SETS:
        data = json.loads((ROOT / "benchmarks" / name).read_text(encoding="utf-8"))
        if "concepts" in data:
            out += [q for c in data["concepts"] for code, q in c["queries"].items() if row in ("all", code)]
        elif row == "all":
            out += [q["query"] for q in data["queries"]]
    return out


def measure(row: str, mode: str, rounds: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, row, mode, str(rounds)],
        input=json.dumps(eval_queries(row)),
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per figure (the median is shown)")
    parser.add_argument("--rounds", type=int, default=20, help="passes over the evaluation queries for the timing")
    parser.add_argument("--rows", default=",".join(ROWS), help="which rows, comma-separated")
    args = parser.parse_args()
    print(f"Python {sys.version.split()[0]}, {args.runs} fresh processes each (median)\n")
    print("| lexicon | retained MB (tracemalloc) | RSS growth MB | load s | load CPU s | gloss µs (CPU) | queries |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for row in args.rows.split(","):
        timed = [measure(row, "time", args.rounds) for _ in range(args.runs)]
        traced = [measure(row, "trace", args.rounds) for _ in range(args.runs)]

        def median(key: str, runs: list[dict[str, float]]) -> float:
            return statistics.median(run[key] for run in runs)

        gloss = f"{median('gloss_us', timed):.0f}" if row != "en" else "-"
        count = len(eval_queries(row)) if row != "en" else "-"
        print(
            f"| {row} | {median('retained', traced):.1f} | {median('rss', timed):.1f} | "
            f"{median('seconds', timed):.2f} | {median('cpu', timed):.2f} | {gloss} | {count} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
