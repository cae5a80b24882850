"""/api/image throughput and latency against nginx serving the same file, in one run, on loopback, measured with wrk.

Run: ``.venv/bin/python benchmarks/image_serving.py [--seconds 10] [--connections 8] [--rounds 3]``.

It generates and ingests the demo library into a temporary data dir and starts nginx (one worker) and one ``imagesvc
serve`` process per configuration (each target is served by a single process) on free loopback ports. wrk then
loads (a) nginx serving the marked display file, (b) /img/ (the embedded image host), (c) /api/image?...&tier=display
for an exempt-but-metered caller (every delivery identifies the caller, looks the page up in the catalog and is
metered in SQLite), (d) the same with Redis as the access backend, and (e) the SQLite setup with the in-memory cache
of public tiers turned off, as for a page nobody asked for lately. The targets take turns, ``--rounds`` times, so a
noisy neighbour hurts them alike; it prints the median requests/s, p50 and p99 per target and the ratios to nginx.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.library import build_library  # noqa: E402
from tests.servers import free_port, start_redis  # noqa: E402

BOOK, PAGE = "demo-speculum-fornacum", 2


def _wait(url: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not answer")


def _wrk(
    url: str, seconds: int, connections: int, headers: dict[str, str], script: Path | None = None
) -> dict[str, float]:
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", url]
    if script is not None:  # a Lua script that shapes each request (benchmarks/signing_workers.py: keys in turn)
        cmd += ["-s", str(script)]
    for name, value in headers.items():
        cmd += ["-H", f"{name}: {value}"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout

    def ms(label: str) -> float:
        m = re.search(rf"^\s*{label}\s+([\d.]+)(us|ms|s)\b", out, re.M)
        if not m:
            return float("nan")
        value, unit = float(m.group(1)), m.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value

    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return {"rps": rps, "p50": ms("50%"), "p99": ms("99%"), "errors": float(non2xx.group(1)) if non2xx else 0.0}


def _serve(data: Path, port: int, extra: dict[str, str]) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "IMAGESVC_DATA_DIR": str(data),
        "IMAGESVC_PORT": str(port),
        "IMAGESVC_LOG_LEVEL": "warning",
        "IMAGESVC_ASSISTANT_NETWORKS": "127.0.0.0/8",
        **extra,
    }
    cmd = [str(REPO / ".venv/bin/imagesvc"), "serve", "--workers", "1"]  # one process per target, as recorded
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)
    _wait(f"http://127.0.0.1:{port}/health")
    return proc


def _nginx(root: Path, port: int, work: Path) -> subprocess.Popen[bytes]:
    conf = work / "nginx.conf"
    conf.write_text(
        f"""daemon off; worker_processes 1; pid {work}/nginx.pid; error_log {work}/error.log;
events {{ worker_connections 1024; }}
http {{ access_log off; sendfile on; tcp_nopush on; client_body_temp_path {work};
  proxy_temp_path {work}; fastcgi_temp_path {work}; uwsgi_temp_path {work}; scgi_temp_path {work};
  server {{ listen 127.0.0.1:{port}; root {root}; location / {{ add_header Cache-Control "public"; }} }} }}
"""
    )
    proc = subprocess.Popen([shutil.which("nginx") or "/usr/sbin/nginx", "-c", str(conf), "-p", str(work)])
    return proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3, help="runs per target, interleaved; medians are reported")
    args = parser.parse_args()
    if not shutil.which("wrk") or not (shutil.which("nginx") or Path("/usr/sbin/nginx").exists()):
        raise SystemExit("needs wrk and nginx (Debian: wrk nginx-light; scripts/install-system-deps.sh)")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        _, data, _ = build_library(work / "lib")
        procs: list[subprocess.Popen[bytes]] = []
        redis_url, stop_redis = start_redis()
        try:
            app_port, redis_port, cold_port, nginx_port = free_port(), free_port(), free_port(), free_port()
            procs.append(_serve(data, app_port, {}))
            procs.append(_serve(data, cold_port, {"IMAGESVC_HOT_CACHE_BYTES": "0"}))
            procs.append(
                _serve(data, redis_port, {"IMAGESVC_ACCESS_BACKEND": "redis", "IMAGESVC_REDIS_URL": redis_url})
            )
            book = urllib.request.urlopen(f"http://127.0.0.1:{app_port}/api/books/{BOOK}").read().decode()
            display_url = re.search(r'"image_display": "([^"]+)"', book).group(1)  # type: ignore[union-attr]
            relative = display_url.split("/img/", 1)[1]
            procs.append(_nginx(data / "store" / "pub", nginx_port, work))
            _wait(f"http://127.0.0.1:{nginx_port}/{relative}")
            agent = {"User-Agent": "bench Claude-User/1.0"}  # exempt (configured network) but metered
            image_path = f"/api/image?book={BOOK}&page={PAGE}&tier=display"
            targets = [
                ("nginx, static file", f"http://127.0.0.1:{nginx_port}/{relative}", {}),
                ("imagesvc /img/ (embedded image host)", f"http://127.0.0.1:{app_port}/img/{relative}", {}),
                ("imagesvc /image, SQLite metering", f"http://127.0.0.1:{app_port}{image_path}", agent),
                ("imagesvc /image, Redis metering", f"http://127.0.0.1:{redis_port}{image_path}", agent),
                (
                    "imagesvc /image, SQLite, no memory cache (every delivery reads the store)",
                    f"http://127.0.0.1:{cold_port}{image_path}",
                    agent,
                ),
            ]
            size = len(urllib.request.urlopen(targets[0][1]).read())
            print(
                f"file: marked display tier, {size:,} bytes; {args.connections} connections, {args.seconds} s a run, "
                f"{args.rounds} rounds (targets take turns; medians reported)\n"
            )
            runs: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in targets}
            for _ in range(args.rounds):
                for name, url, headers in targets:
                    runs[name].append(_wrk(url, args.seconds, args.connections, headers))
            print("| target | requests/s (median) | each round | p50 ms | p99 ms | non-2xx | vs nginx |")
            print("|---|---|---|---|---|---|---|")
            base = None
            for name, results in runs.items():
                rps = statistics.median(r["rps"] for r in results)
                each = " / ".join(f"{r['rps']:,.0f}" for r in results)
                base = base or rps
                print(
                    f"| {name} | {rps:,.0f} | {each} "
                    f"| {statistics.median(r['p50'] for r in results):.2f} "
                    f"| {statistics.median(r['p99'] for r in results):.2f} "
                    f"| {sum(r['errors'] for r in results):.0f} | {rps / base:.0%} |"
                )
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(timeout=10)
            stop_redis()


if __name__ == "__main__":
    main()
