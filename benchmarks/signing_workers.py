"""C2PA signing cost on keyed /api/image, and /api/image over 1 and 2 serving workers beside nginx with 2 workers.

Run: ``.venv/bin/python benchmarks/signing_workers.py [--seconds 10] [--connections 16] [--rounds 3]``.

It ingests the demo library into a temporary data dir (public tiers signed at ingest), issues 300 enterprise keys
(1,000 requests a minute each, so wrk's rotation over them never meets a request limit), and starts on free loopback
ports: nginx with 2 workers serving the marked display file; ``imagesvc serve --workers 1`` and ``--workers 2`` for
/api/image by an exempt-but-metered caller (as in image_serving.py); and two ``--workers 1`` servers for keyed
/api/image (XMP note; SQLite reservation per request), one with IMAGESVC_C2PA_SIGN=false, one signing each delivery.
The targets take turns, ``--rounds`` times; it prints medians and the two ratios the issue asks for. It also times
``sign_delivery`` alone on one thread for the same file. wrk runs on the same machine, so it takes CPU from the
servers: on a 2-core machine two workers compete with wrk for the second core.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.image_serving import BOOK, PAGE, _wait, _wrk  # noqa: E402
from tests.library import build_library  # noqa: E402
from tests.servers import free_port  # noqa: E402

KEYS = 300


def _serve(data: Path, port: int, workers: int, extra: dict[str, str]) -> subprocess.Popen[bytes]:
    import os

    env = {
        **os.environ,
        "IMAGESVC_DATA_DIR": str(data),
        "IMAGESVC_PORT": str(port),
        "IMAGESVC_LOG_LEVEL": "warning",
        "IMAGESVC_ASSISTANT_NETWORKS": "127.0.0.0/8",
        **extra,
    }
    cmd = [str(REPO / ".venv/bin/imagesvc"), "serve", "--workers", str(workers)]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)
    _wait(f"http://127.0.0.1:{port}/health", timeout=60)
    time.sleep(2 if workers > 1 else 0)  # every worker listening, not only the first
    return proc


def _nginx(root: Path, port: int, work: Path, workers: int) -> subprocess.Popen[bytes]:
    conf = work / "nginx.conf"
    conf.write_text(
        f"""daemon off; worker_processes {workers}; pid {work}/nginx.pid; error_log {work}/error.log;
events {{ worker_connections 1024; }}
http {{ access_log off; sendfile on; tcp_nopush on; client_body_temp_path {work};
  proxy_temp_path {work}; fastcgi_temp_path {work}; uwsgi_temp_path {work}; scgi_temp_path {work};
  server {{ listen 127.0.0.1:{port} reuseport; root {root}; location / {{ add_header Cache-Control "public"; }} }} }}
"""
    )
    return subprocess.Popen([shutil.which("nginx") or "/usr/sbin/nginx", "-c", str(conf), "-p", str(work)])


def _keys(data: Path, work: Path) -> Path:
    """KEYS enterprise keys, and a wrk script that sends them in turn."""
    from imagesvc.catalog import Catalog
    from imagesvc.catalog.keys import create_key

    catalog = Catalog(data / "catalog.sqlite3")
    try:
        keys = [create_key(catalog, "enterprise", f"bench {i}")[0] for i in range(KEYS)]
    finally:
        catalog.close()
    script = work / "keys.lua"
    listed = ", ".join(f'"{k}"' for k in keys)
    script.write_text(
        f"local keys = {{{listed}}}\nlocal i = 0\n"
        "request = function()\n  i = i + 1\n"
        '  return wrk.format(nil, nil, {["Authorization"] = "Bearer " .. keys[(i % #keys) + 1]})\nend\n'
    )
    return script


def _sign_alone(data: Path, rounds: int = 200) -> tuple[float, int]:
    """Median ms of sign_delivery on the display tier with its XMP note, one thread; and the file's size."""
    from imagesvc.catalog import Catalog
    from imagesvc.imaging.embed import build_xmp, splice_xmp
    from imagesvc.provenance import Delivery
    from imagesvc.provenance.credentials import ensure_local_ca
    from imagesvc.provenance.sign import sign_delivery

    catalog = Catalog(data / "catalog.sqlite3")
    try:
        page = catalog.page(catalog.find_book(BOOK)["id"], PAGE)
        key = catalog.renditions([page["id"]])[page["id"]]["display"]["public_key"]
    finally:
        catalog.close()
    body = splice_xmp((data / "store" / key).read_bytes(), build_xmp({"requester": "bench"}))
    paths = ensure_local_ca(data / "c2pa", "bench")
    today = dt.date.today().isoformat()
    delivery = Delivery("bench.jpg", "0" * 64, True, "bench", today, "images", "inst", "ed", "https://x", "site")
    sign_delivery(body, delivery, paths)
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        sign_delivery(body, delivery, paths)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), len(body)


def _table(runs: dict[str, list[dict[str, float]]]) -> dict[str, float]:
    print("| target | requests/s (median) | each round | p50 ms | p99 ms | non-2xx |")
    print("|---|---|---|---|---|---|")
    medians = {}
    for name, results in runs.items():
        medians[name] = statistics.median(r["rps"] for r in results)
        each = " / ".join(f"{r['rps']:,.0f}" for r in results)
        p50 = statistics.median(r["p50"] for r in results)
        p99 = statistics.median(r["p99"] for r in results)
        errors = sum(r["errors"] for r in results)
        print(f"| {name} | {medians[name]:,.0f} | {each} | {p50:.2f} | {p99:.2f} | {errors:.0f} |")
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        _, data, _ = build_library(work / "lib")
        keys_script = _keys(data, work)
        ms, size = _sign_alone(data)
        print(f"sign_delivery alone, one thread, display tier with its note ({size:,} bytes): {ms:.2f} ms (median)\n")
        ports = {name: free_port() for name in ("one", "two", "unsigned", "signed", "nginx")}
        procs = [
            _serve(data, ports["one"], 1, {}),
            _serve(data, ports["two"], 2, {}),
            _serve(data, ports["unsigned"], 1, {"IMAGESVC_C2PA_SIGN": "false"}),
            _serve(data, ports["signed"], 1, {}),
        ]
        try:
            import json
            import urllib.request

            book = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{ports['one']}/api/books/{BOOK}").read())
            relative = book["pages"][PAGE - 1]["image_display"].split("/img/", 1)[1]
            procs.append(_nginx(data / "store" / "pub", ports["nginx"], work, 2))
            _wait(f"http://127.0.0.1:{ports['nginx']}/{relative}")
            agent = {"User-Agent": "bench Claude-User/1.0"}
            path = f"/api/image?book={BOOK}&page={PAGE}&tier=display"
            targets = [
                ("nginx, 2 workers, static file", f"http://127.0.0.1:{ports['nginx']}/{relative}", {}, None),
                ("/api/image, 1 worker", f"http://127.0.0.1:{ports['one']}{path}", agent, None),
                ("/api/image, 2 workers", f"http://127.0.0.1:{ports['two']}{path}", agent, None),
                (
                    "keyed /api/image, 1 worker, not signed",
                    f"http://127.0.0.1:{ports['unsigned']}{path}",
                    {},
                    keys_script,
                ),
                ("keyed /api/image, 1 worker, signed", f"http://127.0.0.1:{ports['signed']}{path}", {}, keys_script),
            ]
            print(f"{args.connections} connections, {args.seconds} s a run, {args.rounds} rounds, targets in turn\n")
            runs: dict[str, list[dict[str, float]]] = {name: [] for name, *_ in targets}
            for _ in range(args.rounds):
                for name, url, headers, script in targets:
                    runs[name].append(_wrk(url, args.seconds, args.connections, headers, script))
            m = _table(runs)
            two, one = m["/api/image, 2 workers"], m["/api/image, 1 worker"]
            signed, unsigned = m["keyed /api/image, 1 worker, signed"], m["keyed /api/image, 1 worker, not signed"]
            versus = two / m[targets[0][0]]
            print(f"\n2 workers / 1 worker: {two / one:.2f}x (target 1.7x); 2 workers vs nginx 2 workers: {versus:.0%}")
            print(f"keyed signed / not signed: {signed / unsigned:.0%} (target at least 60%)")
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(timeout=30)


if __name__ == "__main__":
    main()
