"""C2PA signing cost on keyed /api/image, and /api/image over 1 and 2 serving workers beside nginx with 1 and 2.

Run: ``.venv/bin/python benchmarks/signing_workers.py [--seconds 10] [--connections 16] [--rounds 3]``.

It ingests the demo library into a temporary data dir (public tiers signed at ingest), issues 300 enterprise keys
(1,000 requests a minute each, so wrk's rotation over them never meets a request limit), and starts on free loopback
ports nginx with 1 and with 2 workers serving the marked display file (the host's own ceiling for one and two
processes), and ``imagesvc serve`` with 1 and 2 workers, each once signing keyed deliveries and once not
(IMAGESVC_C2PA_SIGN). Public rows are /api/image for an exempt-but-metered caller (as in image_serving.py: no signing,
the file as stored); keyed rows rotate over the keys (XMP note, SQLite reservation, and a per-request manifest when
signing). The targets take turns, ``--rounds`` times; it prints medians, the server's CPU time per request (its whole
process tree; steadier than requests/s on a shared host), the 2-workers/1-worker ratio of each kind and the
signed/not-signed ratio, with the issue's targets, and the host's load before and after. It also times
``sign_delivery`` alone on one thread for the same file. wrk runs on the same machine and takes CPU from the servers:
on a 2-core host, two workers compete with wrk for the second core, which the nginx rows show.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
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
from tests.servers import descendants, free_port  # noqa: E402

KEYS = 300


def _serve(data: Path, port: int, workers: int, extra: dict[str, str]) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "IMAGESVC_DATA_DIR": str(data),
        "IMAGESVC_PORT": str(port),
        "IMAGESVC_LOG_LEVEL": "warning",
        "IMAGESVC_ASSISTANT_NETWORKS": "127.0.0.0/8",
        "IMAGESVC_TEXT_MODEL": "off",  # no search model loading in the background of the measurements
        **extra,
    }
    cmd = [str(REPO / ".venv/bin/imagesvc"), "serve", "--workers", str(workers)]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)
    _wait(f"http://127.0.0.1:{port}/health", timeout=60)
    time.sleep(2 if workers > 1 else 0)  # every worker listening, not only the first
    return proc


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (a supervisor and its workers; nginx's master and workers)."""
    return [pid, *descendants(pid)]


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of ``pid``'s process tree so far."""
    ticks = 0
    for member in _tree(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def _index(data: Path) -> None:
    """Hash the demo library's windows for search by image once, before any server starts: otherwise every serving
    process does it in the background at startup (``serve``'s warm-up) while the first rows are measured."""
    env = {**os.environ, "IMAGESVC_DATA_DIR": str(data), "IMAGESVC_TEXT_MODEL": "off", "IMAGESVC_LOG_LEVEL": "warning"}
    subprocess.run([str(REPO / ".venv/bin/imagesvc"), "index", "--quiet"], env=env, check=True, capture_output=True)


def _settle(pids: list[int], quiet: float = 0.05, limit: float = 300.0) -> float:
    """Wait until the servers' process trees use under ``quiet`` CPU seconds in a second (warm-up done); returns
    the seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        before = sum(_cpu_seconds(pid) for pid in pids)
        time.sleep(1.0)
        if sum(_cpu_seconds(pid) for pid in pids) - before < quiet:
            break
    return time.monotonic() - started


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
    from imagesvc.catalog.api_keys import create_key

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


def _sign_alone(data: Path, rounds: int = 200) -> tuple[float, float, int]:
    """Median ms of sign_delivery on the display tier with its XMP note, one thread, the stored object's segments
    hashed afresh each time and hashed once before; and the file's size."""
    from imagesvc.catalog import Catalog
    from imagesvc.imaging.xmp import build_xmp
    from imagesvc.provenance import Delivery
    from imagesvc.provenance.credentials import ensure_local_ca
    from imagesvc.provenance.sign import sign_delivery
    from imagesvc.serving import tune_malloc

    tune_malloc()  # as every serving process does
    catalog = Catalog(data / "catalog.sqlite3")
    try:
        page = catalog.page(catalog.find_book(BOOK)["id"], PAGE)
        key = catalog.renditions([page["id"]])[page["id"]]["display"]["public_key"]
    finally:
        catalog.close()
    stored, xmp = (data / "store" / key).read_bytes(), build_xmp({"requester": "bench"})
    paths = ensure_local_ca(data / "c2pa", "bench")
    today = dt.date.today().isoformat()
    delivery = Delivery("bench.jpg", "0" * 64, True, "bench", today, "images", "inst", "ed", "https://x", "site")
    medians = []
    for stored_key in (None, (key, "bench", len(stored))):
        sign_delivery(stored, xmp, delivery, paths, stored_key)
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            sign_delivery(stored, xmp, delivery, paths, stored_key)
            times.append((time.perf_counter() - started) * 1000)
        medians.append(statistics.median(times))
    return medians[0], medians[1], len(stored)


def _table(runs: dict[str, list[dict[str, float]]]) -> dict[str, float]:
    print("| target | requests/s (median) | each round | server CPU ms a request | p50 ms | p99 ms | non-2xx |")
    print("|---|---|---|---|---|---|---|")
    medians = {}
    for name, results in runs.items():
        medians[name] = statistics.median(r["rps"] for r in results)
        each = " / ".join(f"{r['rps']:,.0f}" for r in results)
        cpu = statistics.median(r["cpu_ms"] for r in results)
        p50 = statistics.median(r["p50"] for r in results)
        p99 = statistics.median(r["p99"] for r in results)
        errors = sum(r["errors"] for r in results)
        print(f"| {name} | {medians[name]:,.0f} | {each} | {cpu:.2f} | {p50:.2f} | {p99:.2f} | {errors:.0f} |")
    return medians


def _load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"host before: {_load()}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        work.chmod(0o755)  # nginx's workers drop root and read the files as another user
        _, data, _ = build_library(work / "lib")
        keys_script = _keys(data, work)
        cold, warm, size = _sign_alone(data)
        print(
            f"sign_delivery alone, one thread, display tier with its note ({size:,} bytes): {cold:.2f} ms (median), "
            f"{warm:.2f} ms with the stored segments' hash kept\n"
        )
        servers = {  # (workers, signing)
            "signed 1": (1, "true"),
            "signed 2": (2, "true"),
            "unsigned 1": (1, "false"),
            "unsigned 2": (2, "false"),
        }
        ports = {name: free_port() for name in [*servers, "nginx 1", "nginx 2"]}
        _index(data)
        procs = {
            name: _serve(data, ports[name], w, {"IMAGESVC_C2PA_SIGN": sign}) for name, (w, sign) in servers.items()
        }
        print(f"servers idle after {_settle([p.pid for p in procs.values()]):.0f} s of warm-up\n")
        try:
            import json
            import urllib.request

            url = f"http://127.0.0.1:{ports['signed 1']}/api/books/{BOOK}"
            relative = json.loads(urllib.request.urlopen(url).read())["pages"][PAGE - 1]["image_display"]
            relative = relative.split("/img/", 1)[1]
            for n in (1, 2):
                conf = work / f"nginx{n}"
                conf.mkdir()
                procs[f"nginx {n}"] = _nginx(data / "store" / "pub", ports[f"nginx {n}"], conf, n)
                try:
                    _wait(f"http://127.0.0.1:{ports[f'nginx {n}']}/{relative}")
                except SystemExit:
                    log = conf / "error.log"
                    print(log.read_text()[-2000:] if log.exists() else "no nginx log")
                    raise
            agent = {"User-Agent": "bench Claude-User/1.0"}
            path = f"/api/image?book={BOOK}&page={PAGE}&tier=display"

            def at(server: str, where: str) -> str:
                return f"http://127.0.0.1:{ports[server]}{where}"

            targets = [  # (row, server, url, headers, wrk script)
                ("nginx, 1 worker, static file", "nginx 1", at("nginx 1", f"/{relative}"), {}, None),
                ("nginx, 2 workers, static file", "nginx 2", at("nginx 2", f"/{relative}"), {}, None),
                ("public /api/image, 1 worker", "signed 1", at("signed 1", path), agent, None),
                ("public /api/image, 2 workers", "signed 2", at("signed 2", path), agent, None),
                ("keyed /api/image, 1 worker, not signed", "unsigned 1", at("unsigned 1", path), {}, keys_script),
                ("keyed /api/image, 2 workers, not signed", "unsigned 2", at("unsigned 2", path), {}, keys_script),
                ("keyed /api/image, 1 worker, signed", "signed 1", at("signed 1", path), {}, keys_script),
                ("keyed /api/image, 2 workers, signed", "signed 2", at("signed 2", path), {}, keys_script),
            ]
            print(f"{args.connections} connections, {args.seconds} s a run, {args.rounds} rounds, targets in turn\n")
            runs: dict[str, list[dict[str, float]]] = {row: [] for row, *_ in targets}
            for _ in range(args.rounds):
                for row, server, url, headers, script in targets:
                    before = _cpu_seconds(procs[server].pid)
                    result = _wrk(url, args.seconds, args.connections, headers, script)
                    used = _cpu_seconds(procs[server].pid) - before
                    result["cpu_ms"] = 1000 * used / max(1.0, result["rps"] * args.seconds)
                    runs[row].append(result)
            m = _table(runs)
            print()
            for kind in ("nginx", "public /api/image", "keyed /api/image"):
                for suffix in (", not signed", ", signed") if kind.startswith("keyed") else ("",):
                    one = next(v for k, v in m.items() if k.startswith(f"{kind}, 1 worker") and k.endswith(suffix))
                    two = next(v for k, v in m.items() if k.startswith(f"{kind}, 2 workers") and k.endswith(suffix))
                    print(f"{kind}{suffix}: 2 workers / 1 worker = {two / one:.2f}x (target 1.7x for /api/image)")
            for n in ("1 worker", "2 workers"):
                signed, unsigned = m[f"keyed /api/image, {n}, signed"], m[f"keyed /api/image, {n}, not signed"]
                print(f"keyed, {n}: signed / not signed = {signed / unsigned:.0%} (target at least 60%)")
        finally:
            for proc in procs.values():
                proc.terminate()
            for proc in procs.values():
                proc.wait(timeout=30)
    print(f"host after: {_load()}")


if __name__ == "__main__":
    main()
