"""From `imagesvc serve` to dense text search answering, and what a serving worker holds with the text model loaded.

    python benchmarks/text_startup.py --data DIR [--runs 3] [--workers 1] [--text-model e5+minilm] [--query TEXT]

``DIR`` is an ingested data dir whose text index is current (`imagesvc demo` builds one; so does `imagesvc index`).
Each run starts `imagesvc serve` with ``--workers`` workers (1: in the one process; more: under gunicorn's master, as
`make run` serves with one per core) on a free port and times: the first `GET /health` answered, and
the first `GET /api/gallery` whose `search.signals` include `dense-text` (a Hebrew query, polled every 50 ms). Then
it reads the worker's resident memory (VmRSS) from /proc; asks one query in each of the eight languages (every
dictionary and both models read, as in a worker that has served a while) and reads it again, with its peak (VmHWM),
its proportional share (PSS: pages shared with the node's other workers, as the mapped model files are, counted in
part) and whether torch is mapped into it.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

__all__ = ["main"]

QUERY = "נחש הבולע את זנבו"  # "a snake swallowing its tail", for "a serpent biting its own tail"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return json.loads(resp.read())
    except OSError:
        return None


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds ``pid`` and its ended children have used (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def status(pid: int) -> dict[str, float]:
    """The worker's resident memory, its peak, and its proportional share (pages shared with other processes, as
    the mapped model files are between a node's workers, counted in part), MB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == "Pss":
            out[key] = int(value.split()[0]) / 1024
    return out


def every_language() -> list[str]:
    """One query in each language of the cross-lingual set (its first concept's): after them every dictionary and
    both models of the pair have been read, as in a worker that has served a while."""
    sets = json.loads((Path(__file__).parent / "search_eval_languages.json").read_text(encoding="utf-8"))
    return list(sets["concepts"][0]["queries"].values())


def worker_pid(proc: subprocess.Popen, workers: int) -> int:
    """The process that serves: the master's first child (a gunicorn worker, with one worker as with several)."""
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    return int(children[0]) if children else proc.pid


def run(data: Path, workers: int = 1, text_model: str = "e5", text: str = QUERY) -> dict[str, float | bool]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGESVC_")}
    env |= {"IMAGESVC_DATA_DIR": str(data), "IMAGESVC_PORT": str(port), "IMAGESVC_SERVE_WORKERS": str(workers)}
    env["IMAGESVC_TEXT_MODEL"] = text_model
    base = f"http://127.0.0.1:{port}"
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "imagesvc.cli", "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        health = dense = None
        health_cpu = float("nan")
        query = f"{base}/api/gallery?" + urllib.parse.urlencode({"q": text, "maxPerBook": 1000})
        while dense is None and time.perf_counter() - started < 120:
            if health is None:
                if get(f"{base}/health") is not None:
                    health = time.perf_counter() - started
                    health_cpu = cpu_seconds(worker_pid(proc, workers)) + cpu_seconds(proc.pid)
            else:
                body = get(query)
                if body and "dense-text" in body["search"]["signals"]:
                    dense = time.perf_counter() - started
                    top = [i["description"] for i in body["items"][:5]]
                    assert any("serpent biting its own tail" in d for d in top), top
            time.sleep(0.05)
        pid = worker_pid(proc, workers)
        first = status(pid)["VmRSS"]
        for other in every_language():
            get(f"{base}/api/gallery?" + urllib.parse.urlencode({"q": other}))
        memory = status(pid) | {"first": first}
        torch = "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {
        "health": health or float("nan"),
        "health_cpu": health_cpu,
        "dense": dense or float("nan"),
        **memory,
        "torch": torch,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1, help="serving workers (`make run`: one per core)")
    parser.add_argument(
        "--text-model", default="e5+minilm", help="IMAGESVC_TEXT_MODEL (its text index must be current)"
    )
    parser.add_argument("--query", default=QUERY, help="the query polled (default Hebrew, glossed: ranked by e5 alone)")
    args = parser.parse_args()
    print(f"host: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, {args.workers} workers")
    runs = [run(args.data, args.workers, args.text_model, args.query) for _ in range(args.runs)]
    print(
        "| run | /health s | CPU s to /health (master and a worker) | dense search s | worker RSS MB after it "
        "| after a query in each language: RSS MB | peak RSS MB | PSS MB | torch mapped |\n"
        "|---|---|---|---|---|---|---|---|---|"
    )
    for n, r in enumerate(runs, 1):
        print(
            f"| {n} | {r['health']:.2f} | {r['health_cpu']:.2f} | {r['dense']:.2f} | {r['first']:.0f} "
            f"| {r['VmRSS']:.0f} | {r['VmHWM']:.0f} | {r['Pss']:.0f} | {r['torch']} |"
        )
    dense = [float(r["dense"]) for r in runs]
    print(f"median serve -> dense search: {statistics.median(dense):.2f} s (target <= 5 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
