"""JSON-RPC batch abuse against a real ``imagesvc serve``: peak RSS and ``/health`` latency while it goes on.

Run: ``.venv/bin/python benchmarks/batch_abuse.py [--seconds 20]``. It generates and ingests the demo library
(``imagesvc demo``) into a temporary data dir, starts one ``imagesvc serve`` on loopback, and runs three phases of
``--seconds`` each while a probe (a process of its own) asks ``/health`` every 20 ms and the server's RSS is sampled
every 50 ms:

- ``idle``: the probe alone (the reference);
- ``reported``: the abuse of issue 12, four concurrent anonymous POSTs of 6,500 ``get_book`` calls (0.9 MB bodies),
  sent again as soon as each is answered;
- ``exempt``: eight concurrent POSTs of 50 ``get_book`` calls (the batch cap, each answer with thumbnails) from a
  caller no request limit applies to (an assistant fetch from a configured network), the worst case the caps leave.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import http.client
import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.servers import free_port, wait_healthy  # noqa: E402

__all__ = ["main"]

IMAGESVC = str(REPO / ".venv" / "bin" / "imagesvc")
ASSISTANT = {"User-Agent": "Mozilla/5.0 (compatible; Claude-User/1.0)"}
BOOK = "demo-speculum-fornacum"


def _rss_mib(pid: int) -> float:
    match = re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{pid}/status").read_text())
    return int(match.group(1)) / 1024 if match else 0.0


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(p * len(ordered) + 0.999999) - 1))] if ordered else float("nan")


def _probe(url: str, seconds: float) -> list[float]:
    """Milliseconds each ``GET /health`` took, one every 20 ms for ``seconds``, over one keep-alive connection."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    times: list[float] = []
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        t0 = time.perf_counter()
        conn.request("GET", "/health")
        conn.getresponse().read()
        times.append((time.perf_counter() - t0) * 1000)
        time.sleep(0.02)
    conn.close()
    return times


def _batch(n: int) -> bytes:
    call = {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "get_book", "arguments": {"book_id": BOOK}}}
    return json.dumps([{**call, "id": i} for i in range(n)]).encode()


async def _phase(url: str, pid: int, seconds: float, senders: int, body: bytes | None, headers: dict[str, str]) -> dict:
    """Run ``senders`` loops POSTing ``body`` (none when None) while probing /health and sampling RSS."""
    stop = time.monotonic() + seconds
    health: list[float] = []
    rss: list[float] = []
    counts = {"posts": 0, "bytes": 0, "errors": 0, "rate_limited": 0, "too_large": 0, "answered": 0, "refused": 0}

    async def sample() -> None:
        while time.monotonic() < stop:
            rss.append(_rss_mib(pid))
            await asyncio.sleep(0.05)

    async def probe() -> None:
        # In a process of its own: this one's event loop is busy parsing the abusers' multi-megabyte answers.
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            health.extend(await asyncio.get_running_loop().run_in_executor(pool, _probe, url, stop - time.monotonic()))

    async def send(session: aiohttp.ClientSession) -> None:
        headers_json = {"Content-Type": "application/json", **headers}
        while body is not None and time.monotonic() < stop:
            async with session.post(f"{url}/api/mcp", data=body, headers=headers_json) as resp:
                raw = await resp.read()
            counts["posts"] += 1
            counts["bytes"] += len(raw)
            reply = json.loads(raw)
            if isinstance(reply, dict):
                counts["refused"] += 1  # the whole batch refused (over the message cap)
                continue
            for item in reply:
                result = item.get("result", {})
                code = result.get("structuredContent", {}).get("error") if result.get("isError") else None
                if code is None and "error" not in item:
                    counts["answered"] += 1
                elif code == "rate_limited":
                    counts["rate_limited"] += 1
                elif code == "invalid_request" and "max_response_bytes" in result["structuredContent"]:
                    counts["too_large"] += 1
                else:
                    counts["errors"] += 1

    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(timeout=timeout) as load:
        await asyncio.gather(sample(), probe(), *(send(load) for _ in range(senders)))
    return {
        "rss_peak_mib": max(rss),
        "rss_end_mib": rss[-1],
        "health_n": len(health),
        "health_p50_ms": _pct(health, 0.50),
        "health_p99_ms": _pct(health, 0.99),
        "health_max_ms": max(health),
        **counts,
    }


async def _run(seconds: float, work: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGESVC_")} | {
        "IMAGESVC_DATA_DIR": str(work / "data"),
        "IMAGESVC_SITE_URL": "https://library.example",
        "IMAGESVC_ASSISTANT_NETWORKS": "127.0.0.0/8",
        "IMAGESVC_LOG_LEVEL": "warning",
        "IMAGESVC_WORKERS": "2",
    }
    t0 = time.monotonic()
    done = subprocess.run([IMAGESVC, "demo", "--quiet"], env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"imagesvc demo failed:\n{done.stderr[-3000:]}")
    print(f"demo library ingested in {time.monotonic() - t0:.0f} s")
    port = free_port()
    log = open(work / "serve.log", "wb")  # noqa: SIM115 - lives as long as the process
    proc = subprocess.Popen([IMAGESVC, "serve"], env=env | {"IMAGESVC_PORT": str(port)}, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, work / "serve.log", timeout=30)
        print(f"RSS at start: {_rss_mib(proc.pid):.0f} MiB")
        phases = [
            ("idle", 0, None, {}),
            ("reported", 4, _batch(6500), {}),
            ("exempt", 8, _batch(50), ASSISTANT),
        ]
        header = f"{'phase':<9} {'posts':>6} {'MB out':>7} {'answered':>8} {'limited':>7} {'too big':>7} {'refused':>7}"
        rows = [header + f" {'RSS peak':>8} {'RSS end':>8} {'health p50':>10} {'p99':>7} {'max':>7} {'probes':>6}"]
        for name, senders, body, headers in phases:
            r = await _phase(url, proc.pid, seconds, senders, body, headers)
            rows.append(
                f"{name:<9} {r['posts']:>6} {r['bytes'] / 1e6:>7.1f} {r['answered']:>8} {r['rate_limited']:>7} "
                f"{r['too_large']:>7} {r['refused']:>7} {r['rss_peak_mib']:>7.0f}M {r['rss_end_mib']:>7.0f}M "
                f"{r['health_p50_ms']:>8.1f}ms {r['health_p99_ms']:>5.1f}ms {r['health_max_ms']:>5.0f}ms "
                f"{r['health_n']:>6}"
            )
            if r["errors"]:
                rows.append(f"  {r['errors']} unexpected error replies in phase {name}")
        print("\n".join(rows))
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each phase")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="batch-abuse-") as tmp:
        asyncio.run(_run(args.seconds, Path(tmp)))


if __name__ == "__main__":
    main()
