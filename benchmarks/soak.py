"""Soak: two ``imagesvc serve`` nodes sharing Redis and a moto S3 server, driven with mixed traffic for a bounded time.

Run: ``.venv/bin/python benchmarks/soak.py [--minutes 5] [--concurrency 16]``. It generates the demo library, creates
API keys of several tiers on an ingest host, ingests into a moto S3 server (its own process) which publishes a catalog
snapshot with the keys, starts two nodes on loopback following that snapshot, and then runs ``--concurrency`` aiohttp
workers against both nodes until the time is up. Most traffic is a user-directed assistant fetch (exempt, metered);
keyed callers are paced under their per-minute limits; anonymous callers deliberately run past theirs. It samples each
node's RSS, and prints requests/s, status counts, latency percentiles per route class, RSS figures and end checks
(both nodes healthy, image budget meter equal to images delivered, anonymous limit exact across both nodes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from fixtures.generate import generate  # noqa: E402
from tests.servers import free_port, start_redis, wait_healthy  # noqa: E402

__all__ = ["main"]

IMAGESVC = str(REPO / ".venv" / "bin" / "imagesvc")
ASSISTANT = {"User-Agent": "Mozilla/5.0 (compatible; Claude-User/1.0)"}
WORDS = ("mining", "woodcut", "star", "furnace", "plant", "map", "ship", "angel", "xyzzy")


@dataclass
class Caller:
    """Who sends a request: headers, and a pace (requests/s over both nodes) that keeps it under its limit."""

    name: str
    headers: dict[str, str]
    rate: float | None = None
    next_slot: float = 0.0

    def take(self, now: float) -> bool:
        if self.rate is None:
            return True
        if now < self.next_slot:
            return False
        self.next_slot = max(now, self.next_slot) + 1 / self.rate
        return True


@dataclass
class Stats:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    statuses: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    by_caller: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    mcp_tool_errors: int = 0


def _sh(args: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args[:3])} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def _rss_kib(pid: int) -> int:
    """VmRSS of ``pid`` plus every descendant (a node's worker processes count against it)."""
    total = 0
    try:
        match = re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{pid}/status").read_text())
        total = int(match.group(1)) if match else 0
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                total += _rss_kib(int(child))
    except OSError:
        pass
    return total


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(p * len(ordered) + 0.999999) - 1))] if ordered else float("nan")


async def _get_json(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> Any:
    async with session.get(url, headers=headers) as resp:
        resp.raise_for_status()
        return await resp.json()


async def _discover(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    """Book slugs, pages with an image, pages with text, and illustration ids, as the service lists them."""
    books = (await _get_json(session, f"{url}/api/books?limit=100", ASSISTANT))["books"]
    pages, texts, illus = [], [], []
    for book in books:
        detail = await _get_json(session, f"{url}/api/books/{book['slug']}", ASSISTANT)
        for page in detail["pages"]:
            entry = (book["slug"], book["id"], page["number"])
            texts.append(entry)
            if not page.get("image_unavailable"):
                pages.append(entry)
        images = await _get_json(session, f"{url}/api/books/{book['slug']}/images", ASSISTANT)
        illus += [item["id"] for item in images.get("images", images.get("items", []))]
    return {"slugs": [b["slug"] for b in books], "pages": pages, "texts": texts, "illus": illus}


def _scenarios(lib: dict[str, Any], c: dict[str, Caller]) -> list[tuple[str, Caller, float, Any]]:
    """(route class, caller, weight, request maker) rows; a maker returns (method, path, json body or None, expect)."""
    pg, tx, rnd = lib["pages"], lib["texts"], random.choice

    def image(tier: str, clean: bool = False) -> Any:
        def make() -> tuple[str, str, Any, set[int]]:
            slug, _, n = rnd(pg)
            return "GET", f"/api/image?book={slug}&page={n}&tier={tier}" + ("&clean=1" if clean else ""), None, {200}

        return make

    def tile() -> tuple[str, str, Any, set[int]]:
        region, size = rnd(
            [("full", "256,"), ("0,0,1024,1024", "512,"), ("512,512,512,512", "256,"), ("full", "!400,400")]
        )
        _, book_id, n = rnd(pg)
        return "GET", f"/iiif/3/{book_id}-{n}/{region}/{size}/0/default.jpg", None, {200}

    def mcp() -> tuple[str, str, Any, set[int]]:
        slug, _, n = rnd(tx)
        name, args = rnd(
            [
                ("get_book", {"book_id": slug}),
                ("get_quote", {"book_id": slug, "page": n}),
                ("search_images", {"query": rnd(WORDS)}),
            ]
        )
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": args}}
        return "POST", "/api/mcp", body, {200}

    def get(path: Any, expect: set[int] = frozenset({200})) -> Any:  # type: ignore[assignment]
        return lambda: ("GET", path() if callable(path) else path, None, set(expect))

    book = get(lambda: f"/api/books/{rnd(lib['slugs'])}")
    quote = get(lambda: "/api/books/{}/quote?page={}".format(*rnd(tx)[::2]))
    text = get(lambda: f"/api/books/{rnd(lib['slugs'])}/text?content=ocr&from=1&to=3")
    gallery = get(lambda: f"/api/gallery?q={rnd(WORDS)}&limit=12")
    info = get(lambda: "/iiif/3/{}-{}/info.json".format(*rnd(pg)[1:]))
    a, anon = c["assistant"], [c["anon-1"], c["anon-2"], c["anon-3"]]
    rows = [
        ("book page", a, 10, book),
        ("book page", c["language"], 1, book),
        ("image display", a, 8, image("display")),
        ("image thumb", a, 8, image("thumb")),
        ("image display", c["full"], 3, image("display")),
        ("image thumb", c["full"], 3, image("thumb")),
        ("image clean", c["full"], 3, image("display", clean=True)),
        ("illustration image", a, 3, get(lambda: f"/api/image?illustration={rnd(lib['illus'])}&tier=thumb")),
        ("quote", c["free-1"], 1, quote),
        ("text", c["free-2"], 1, text),
        ("quote", c["free-3"], 1, quote),
        ("gallery", a, 6, gallery),
        ("gallery", c["language"], 1, gallery),
        ("iiif info", a, 4, info),
        ("iiif tile", a, 6, tile),
        ("iiif tile", c["enterprise"], 3, tile),
        ("mcp", a, 4, mcp),
        ("mcp", c["domain"], 2, mcp),
        ("rate_limit", a, 2, get("/api/rate_limit")),
        ("404 on purpose", a, 1, get("/api/books/no-such-book", {404})),
        ("404 on purpose", a, 1, get("/api/image?book=no-such-book&page=1&tier=thumb", {404})),
        ("400 on purpose", a, 1, get(lambda: f"/api/image?book={rnd(lib['slugs'])}&page=abc&tier=thumb", {400})),
        ("400 on purpose", a, 1, get("/api/gallery?limit=-5", {400})),
    ]
    rows += [("anonymous", who, 0.5, get("/api/books?limit=5")) for who in anon]
    return rows


async def _drive(
    nodes: list[str], rows: list[Any], stats: Stats, deadline: float, concurrency: int, stop: asyncio.Event
) -> int:
    weights = [r[2] for r in rows]
    sent = 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal sent
        while (now := time.monotonic()) < deadline and not stop.is_set():
            label, caller, _, make = random.choices(rows, weights)[0]
            if not caller.take(now):
                continue
            method, path, body, expect = make()
            start = time.perf_counter()
            try:
                async with session.request(
                    method, random.choice(nodes) + path, json=body, headers=caller.headers
                ) as resp:
                    payload = await resp.read()
                    status = resp.status
                if label == "mcp" and status == 200 and json.loads(payload).get("result", {}).get("isError"):
                    stats.mcp_tool_errors += 1
            except (TimeoutError, aiohttp.ClientError) as exc:
                status = type(exc).__name__
            sent += 1
            stats.latencies[label].append((time.perf_counter() - start) * 1000)
            kind = str(status) if status in expect or status == 429 else f"unexpected {status}"
            stats.statuses[label][kind] += 1
            stats.by_caller[caller.name][str(status)] += 1

    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return sent


async def _sample(procs: list[Any], samples: list[tuple[float, list[int]]], stop: asyncio.Event, every: float) -> None:
    """RSS of both nodes every ``every`` seconds; sets ``stop`` (ending the load) if a node exits."""
    start = time.monotonic()
    while not stop.is_set():
        samples.append((time.monotonic() - start, [_rss_kib(p.pid) for p in procs]))
        for name, proc in zip("ab", procs, strict=True):
            if proc.poll() is not None:
                print(f"node {name} EXITED with code {proc.returncode} at {samples[-1][0]:.0f} s; load stopped")
                stop.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every)
    samples.append((time.monotonic() - start, [_rss_kib(p.pid) for p in procs]))


def _report(
    args: Any, rows: list[Any], stats: Stats, sent: int, seconds: float, samples: list[Any], cpu: list[float]
) -> None:
    total = Counter[str]()
    for counter in stats.statuses.values():
        total.update(counter)
    errors = sum(n for k, n in total.items() if k.startswith("unexpected 5") or not k.split()[-1].isdigit())
    print(
        f"\n{sent:,} requests in {seconds:.0f} s = {sent / seconds:.0f} requests/s over both nodes; "
        f"{args.concurrency} workers; errors (5xx + transport) {errors} = {errors / max(sent, 1):.3%}; "
        f"MCP tool results with isError: {stats.mcp_tool_errors}; node CPU s: {cpu[0]:.0f} / {cpu[1]:.0f}; "
        f"load generator CPU s: {cpu[2]:.0f}\n"
    )
    print("| route class | requests | statuses | p50 ms | p95 ms | p99 ms |\n|---|---|---|---|---|---|")
    order = [label for label, *_ in rows]
    everything = [v for lat in stats.latencies.values() for v in lat]
    for label, lat in [*sorted(stats.latencies.items(), key=lambda item: order.index(item[0])), ("all", everything)]:
        st = "" if label == "all" else ", ".join(f"{k}: {n:,}" for k, n in sorted(stats.statuses[label].items()))
        print(
            f"| {label} | {len(lat):,} | {st} | {_pct(lat, 0.5):.1f} | {_pct(lat, 0.95):.1f} | {_pct(lat, 0.99):.1f} |"
        )
    print("\n| node | RSS start MiB | peak MiB | end MiB | second half growth MiB | second half slope MiB/min |")
    print("|---|---|---|---|---|---|")
    half = samples[-1][0] / 2
    for i in range(2):
        rss = [(t, s[i] / 1024) for t, s in samples]
        second = [(t, v) for t, v in rss if t >= half]
        mt, mv = sum(t for t, _ in second) / len(second), sum(v for _, v in second) / len(second)
        slope = sum((t - mt) * (v - mv) for t, v in second) / max(sum((t - mt) ** 2 for t, _ in second), 1e-9) * 60
        print(
            f"| {'ab'[i]} | {rss[0][1]:.1f} | {max(v for _, v in rss):.1f} | {rss[-1][1]:.1f} "
            f"| {second[-1][1] - second[0][1]:+.1f} | {slope:+.2f} |"
        )


async def _checks(nodes: list[str], stats: Stats, callers: dict[str, Caller]) -> None:
    async with aiohttp.ClientSession() as session:
        for i, url in enumerate(nodes):
            try:
                async with session.get(f"{url}/health") as resp:
                    print(f"- node {'ab'[i]} /health after the run: {resp.status}")
            except aiohttp.ClientError as exc:
                print(f"- node {'ab'[i]} /health after the run: NO ANSWER ({type(exc).__name__})")
                return
        await asyncio.sleep(2)  # a delivery is metered as its response completes
        usage = await _get_json(session, f"{nodes[0]}/api/dataset/v1/usage?days=2", callers["full"].headers)
        metered = sum(row["units"] for row in usage["usage"] if row["pool"] == "images")
        delivered = stats.by_caller["full"]["200"]
        print(
            f"- full-tier key: images delivered (200s) {delivered:,}, usage meter {metered:,}: "
            f"{'equal' if metered == delivered else 'DIFFERENT'}"
        )
        for name in ("anon-1", "anon-2", "anon-3"):
            got = stats.by_caller[name]
            print(f"- {name}: {got['200']} x 200, {got['429']} x 429 (limit 60 an hour, shared by both nodes)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--sample-seconds", type=float, default=5.0)
    args = parser.parse_args()
    if args.minutes > 10:
        raise SystemExit("a soak here is bounded to 10 minutes")
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        work = Path(tmp)
        redis_url, stop_redis = start_redis()
        moto_port = free_port()
        moto = subprocess.Popen(
            [str(REPO / ".venv/bin/moto_server"), "-H", "127.0.0.1", "-p", str(moto_port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        procs: list[subprocess.Popen[bytes]] = []
        try:
            asyncio.run(_run(args, work, redis_url, f"http://127.0.0.1:{moto_port}", procs))
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
            for proc in procs:
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
            moto.terminate()
            moto.wait(timeout=10)
            stop_redis()


async def _run(args: Any, work: Path, redis_url: str, s3: str, procs: list[subprocess.Popen[bytes]]) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("IMAGESVC_")}
    shared = base | {
        "IMAGESVC_STORAGE": "s3",
        "IMAGESVC_S3_ENDPOINT": s3,
        "IMAGESVC_S3_BUCKET": "soak",
        "IMAGESVC_S3_ACCESS_KEY": "moto-access",
        "IMAGESVC_S3_SECRET_KEY": "moto-secret",
        "IMAGESVC_ACCESS_BACKEND": "redis",
        "IMAGESVC_REDIS_URL": redis_url,
        "IMAGESVC_SESSION_SECRET": "soak",
        "IMAGESVC_SITE_URL": "https://library.example",
        "IMAGESVC_TRUSTED_PROXIES": "127.0.0.1",
        "IMAGESVC_ASSISTANT_NETWORKS": "127.0.0.0/8",
        "IMAGESVC_SNAPSHOT_PREFIX": "snapshots",
        "IMAGESVC_LOG_LEVEL": "warning",
        "IMAGESVC_WORKERS": "2",
        "IMAGESVC_IMAGE_HOST": "https://img.example",
    }
    host = shared | {"IMAGESVC_DATA_DIR": str(work / "host")}
    manifest = generate(work / "src")
    tiers = {"language": "language", "domain": "domain", "full": "full", "enterprise": "enterprise"}
    tiers |= {f"free-{i}": "free" for i in (1, 2, 3)}
    keys = {
        name: json.loads(_sh([IMAGESVC, "keys", "create", "--tier", t, "--label", name, "--json"], host))["key"]
        for name, t in tiers.items()
    }
    t0 = time.monotonic()
    _sh([IMAGESVC, "ingest", str(manifest), "--quiet"], host)  # into S3; publishes a snapshot holding the keys
    print(f"ingest into moto S3: {time.monotonic() - t0:.0f} s")
    per_minute = {"language": 120, "domain": 300, "full": 600, "enterprise": 1000, "free": 60}
    callers = {
        n: Caller(n, {"Authorization": f"Bearer {k}"}, per_minute[tiers[n]] * 0.85 / 60) for n, k in keys.items()
    }
    callers["assistant"] = Caller("assistant", ASSISTANT)
    net = random.randrange(1, 200)
    callers |= {f"anon-{i}": Caller(f"anon-{i}", {"X-Forwarded-For": f"203.0.113.{net + i}"}) for i in (1, 2, 3)}
    nodes = []
    for name in ("a", "b"):
        port = free_port()
        env = shared | {"IMAGESVC_DATA_DIR": str(work / f"node-{name}"), "IMAGESVC_PORT": str(port)}
        log = open(work / f"node-{name}.log", "wb")  # noqa: SIM115 - lives as long as the process
        procs.append(subprocess.Popen([IMAGESVC, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT))
        nodes.append(f"http://127.0.0.1:{port}")
    async with aiohttp.ClientSession() as session:
        for name, url, proc in zip("ab", nodes, procs, strict=True):
            wait_healthy(url, proc, work / f"node-{name}.log", timeout=30)
        lib = await _discover(session, nodes[0])
    print(
        f"library: {len(lib['slugs'])} books, {len(lib['pages'])} pages with images, {len(lib['illus'])} illustrations"
    )
    stats, samples, stop = Stats(), [], asyncio.Event()
    cpu0 = [_cpu_seconds(p.pid) for p in procs] + [time.process_time()]
    sampler = asyncio.create_task(_sample(procs, samples, stop, args.sample_seconds))
    start = time.monotonic()
    rows = _scenarios(lib, callers)
    sent = await _drive(nodes, rows, stats, start + args.minutes * 60, args.concurrency, stop)
    seconds = time.monotonic() - start
    stop.set()
    await sampler
    for name, proc in zip("ab", procs, strict=True):
        if proc.poll() is not None:
            print(f"node {name} log tail:\n{(work / f'node-{name}.log').read_text(errors='replace')[-3000:]}")
    cpu = [_cpu_seconds(p.pid) - c for p, c in zip(procs, cpu0, strict=False)] + [time.process_time() - cpu0[2]]
    _report(args, rows, stats, sent, seconds, samples, cpu)
    print()
    await _checks(nodes, stats, callers)


if __name__ == "__main__":
    main()
