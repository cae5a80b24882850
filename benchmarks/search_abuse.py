"""Search-by-image floods against a real ``imagesvc serve``: ``/health`` and ``/api/books/<id>`` latency and the
workers' memory while one anonymous address and one free key flood it.

Run: ``.venv/bin/python benchmarks/search_abuse.py [--seconds 30] [--senders 8]``. It generates and ingests the demo
library (``imagesvc demo``) into a temporary data dir, issues a free key, starts ``imagesvc serve`` on loopback
(two worker processes), warms search by image up with one query, then runs three phases of ``--seconds`` each while a
probe (a process of its own) asks ``/health`` and ``/api/books/<id>`` in turn every 50 ms over one keep-alive
connection and the RSS of every server process is sampled every 100 ms:

- ``idle`` and ``after``: the probe alone (the references, before and after the flood);
- ``flood``: ``--senders`` concurrent uploads from the anonymous address and as many from the free key, each sent
  again as soon as it is answered, alternating a crop of a demo woodcut (a JPEG, the real query) and a
  40-megapixel uniform PNG (131 KB on the wire, the attack of issue 22: 120 MB of pixels when decoded whole).

Done means (issue 22): p99 of both probes <= 200 ms during the flood and no process past 1 GiB.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import http.client
import io
import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp
from PIL import Image, ImageOps

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.servers import free_port, wait_healthy  # noqa: E402

__all__ = ["main"]

IMAGESVC = str(Path(sys.executable).parent / "imagesvc")
BOOK = "demo-speculum-fornacum"
ROUTE = "/api/gallery/search-by-image"
# The probe: an assistant's fetch from a configured network, which no request limit applies to, so every probe is
# served in full (a 429 would measure nothing); the flood comes from the same address as an ordinary client.
ASSISTANT = {"User-Agent": "Mozilla/5.0 (compatible; Claude-User/1.0)"}


def _tree(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            with contextlib.suppress(OSError):  # the process ended meanwhile
                todo.extend(int(c) for c in task.read_text().split())
    return out


def _rss_mib(pid: int) -> float:
    try:
        match = re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{pid}/status").read_text())
    except OSError:
        return 0.0
    return int(match.group(1)) / 1024 if match else 0.0


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(p * len(ordered) + 0.999999) - 1))] if ordered else float("nan")


def _probe(url: str, seconds: float) -> dict[str, list[float]]:
    """Milliseconds each probe took: ``/health`` and ``/api/books/<id>`` in turn, one every 50 ms."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    times: dict[str, list[float]] = {"health": [], "book": []}
    paths = {"health": "/health", "book": f"/api/books/{BOOK}"}
    stop = time.monotonic() + seconds
    n = 0
    while time.monotonic() < stop:
        name = "health" if n % 2 == 0 else "book"
        n += 1
        t0 = time.perf_counter()
        conn.request("GET", paths[name], headers=ASSISTANT)  # a caller no request limit applies to
        conn.getresponse().read()
        times[name].append((time.perf_counter() - t0) * 1000)
        time.sleep(0.05)
    conn.close()
    return times


def _uploads(data_dir: Path) -> list[bytes]:
    """The two pictures the flood sends: a crop of a demo woodcut (JPEG) and a 40-megapixel uniform PNG."""
    root = next((data_dir / "demo-source").rglob("demo-expected.json")).parent
    expected = json.loads((root / "demo-expected.json").read_text(encoding="utf-8"))
    pages = {(p["book"], p["page"]): p["image"] for p in expected["pages"]}
    first = next(i for i in expected["illustrations"] if i.get("block"))
    x0, y0, x1, y1 = first["box"]
    w, h = x1 - x0, y1 - y0
    page = ImageOps.exif_transpose(Image.open(root / pages[(first["book"], first["page"])])).convert("RGB")
    crop, big = io.BytesIO(), io.BytesIO()
    page.crop((x0 + w // 5, y0 + h // 5, x1 - w // 5, y1 - h // 5)).save(crop, "JPEG", quality=85)
    Image.new("L", (8000, 5000), 255).save(big, "PNG", optimize=True)
    return [crop.getvalue(), big.getvalue()]


async def _phase(url: str, pid: int, seconds: float, senders: int, uploads: list[bytes], key: str) -> dict:
    stop = time.monotonic() + seconds
    probes: dict[str, list[float]] = {}
    rss: dict[int, float] = {}
    statuses: Counter[str] = Counter()

    async def sample() -> None:
        while time.monotonic() < stop:
            for p in _tree(pid):
                rss[p] = max(rss.get(p, 0.0), _rss_mib(p))
            await asyncio.sleep(0.1)

    async def probe() -> None:
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            probes.update(await asyncio.get_running_loop().run_in_executor(pool, _probe, url, stop - time.monotonic()))

    async def send(session: aiohttp.ClientSession, who: str, n: int) -> None:
        headers = {"Content-Type": "image/png"}
        if who == "key":
            headers["Authorization"] = f"Bearer {key}"
        while time.monotonic() < stop:
            body = uploads[n % len(uploads)]
            n += 1
            ctype = "image/jpeg" if body[:2] == b"\xff\xd8" else "image/png"
            try:
                async with session.post(f"{url}{ROUTE}", data=body, headers=headers | {"Content-Type": ctype}) as r:
                    await r.read()
                    statuses[f"{who} {r.status}"] += 1
            except aiohttp.ClientError as exc:
                statuses[f"{who} {type(exc).__name__}"] += 1
                await asyncio.sleep(0.1)

    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(timeout=timeout) as anon, aiohttp.ClientSession(timeout=timeout) as keyed:
        floods = [send(anon, "anonymous", i) for i in range(senders)] + [send(keyed, "key", i) for i in range(senders)]
        await asyncio.gather(sample(), probe(), *floods)
    return {"probes": probes, "rss": rss, "statuses": statuses}


def _serve_env(work: Path) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("IMAGESVC_")} | {
        "IMAGESVC_DATA_DIR": str(work / "data"),
        "IMAGESVC_SITE_URL": "https://library.example",
        "IMAGESVC_LOG_LEVEL": "warning",
        "IMAGESVC_ASSISTANT_NETWORKS": "127.0.0.0/8",
        "IMAGESVC_SERVE_WORKERS": "2",
        "IMAGESVC_WORKERS": "2",
    }


async def _run(seconds: float, senders: int, work: Path) -> None:
    env = _serve_env(work)
    t0 = time.monotonic()
    done = subprocess.run([IMAGESVC, "demo", "--quiet"], env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"imagesvc demo failed:\n{done.stderr[-3000:]}")
    print(f"demo library ingested in {time.monotonic() - t0:.0f} s")
    made = subprocess.run(
        [IMAGESVC, "keys", "create", "--tier", "free", "--json"], env=env, capture_output=True, text=True, check=True
    )
    key = json.loads(made.stdout)["key"]
    uploads = _uploads(work / "data")
    port = free_port()
    log = open(work / "serve.log", "wb")  # noqa: SIM115 - lives as long as the process
    proc = subprocess.Popen([IMAGESVC, "serve"], env=env | {"IMAGESVC_PORT": str(port)}, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
            wait_healthy(url, proc, work / "serve.log", timeout=60)
            t0 = time.monotonic()
            for _ in range(4):  # each worker builds its block index on its first query
                auth = {"Authorization": f"Bearer {key}", "Content-Type": "image/jpeg"}
                async with session.post(f"{url}{ROUTE}", data=uploads[0], headers=auth) as resp:
                    await resp.read()
            print(f"warm-up queries: {time.monotonic() - t0:.0f} s (last {resp.status})")
        print(f"RSS at start: {', '.join(f'{_rss_mib(p):.0f}' for p in _tree(proc.pid))} MiB")
        print(
            f"{'phase':<6} {'health p50':>10} {'p99':>7} {'max':>7} {'book p50':>9} {'p99':>7} {'max':>7} "
            f"{'probes':>6} {'RSS peak (MiB, per process)':<28} answers"
        )
        for name, n in (("idle", 0), ("flood", senders), ("after", 0)):
            r = await _phase(url, proc.pid, seconds, n, uploads, key)
            h, b = r["probes"]["health"], r["probes"]["book"]
            peaks = ", ".join(f"{v:.0f}" for v in sorted(r["rss"].values(), reverse=True))
            answers = ", ".join(f"{k}: {v}" for k, v in sorted(r["statuses"].items()))
            print(
                f"{name:<6} {_pct(h, 0.5):>8.1f}ms {_pct(h, 0.99):>5.0f}ms {max(h):>5.0f}ms {_pct(b, 0.5):>7.1f}ms "
                f"{_pct(b, 0.99):>5.0f}ms {max(b):>5.0f}ms {len(h) + len(b):>6} {peaks:<28} {answers or '-'}"
            )
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each phase")
    parser.add_argument("--senders", type=int, default=8, help="concurrent uploads per flooding caller")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="search-abuse-") as tmp:
        asyncio.run(_run(args.seconds, args.senders, Path(tmp)))


if __name__ == "__main__":
    main()
