"""Faults under load: two ``imagesvc serve`` nodes on one PostgreSQL, one Redis and one local store, while the
dependencies hang, lock, restart and stop, and while callers flood costly work or hold archives unread.

Run: ``.venv/bin/python benchmarks/faults.py [--hang 60] [--long-hang 150] [--lock 20] [--seed 43]``
(``--quick`` shortens every phase for a smoke run). It ingests the demo library into a throw-away PostgreSQL
catalog, issues keys, starts two nodes (two gunicorn workers each) and a steady mixed load from a process of its own
(liveness and a public ``/img/`` tier every 50 ms, a book's metadata and a keyed ``/api/image`` every 250 ms, on
each node), then runs the scenarios of issue 43 in turn, each followed by a quiet spell:

- ``baseline``: nothing wrong;
- ``hang``/``long-hang``: every PostgreSQL process stopped with SIGSTOP for ``--hang`` and ``--long-hang`` seconds
  (past gunicorn's 120 s worker timeout), then SIGCONT;
- ``lock``: ``ACCESS EXCLUSIVE`` on ``books`` held in another session for ``--lock`` seconds;
- ``restart``: PostgreSQL stopped and started again (a fast shutdown), then ``cold-start``: a third node started
  while PostgreSQL is down, which must come up live and become ready once it is back;
- ``redis``: Redis stopped for 10 s and started again on the same port;
- ``within-flood``: 12 anonymous and 4 keyed callers sending a 32-phrase search inside a book, each again as soon
  as it is answered;
- ``held-archives``: 400 archives opened by an enterprise key whose reader takes the response head and then reads
  nothing; the workers' RSS with them open and after they close, and the units charged for them.

For each phase it prints p50/p99/max and the statuses of each probed route, the time from the fault's end to the
first 200 of a catalog route, and the longest a catalog route took to answer during the fault. Targets (issue 43):
liveness and ``/img/`` p99 <= 100 ms throughout; catalog routes 503 within the stated deadline while hung, 200
within 2 s of the database resuming; ``/health`` p99 <= 200 ms under the floods; units charged = members received;
worker RSS <= +200 MB with 400 held archives and back after they close.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.search_abuse import _pct, _rss_mib, _tree  # noqa: E402
from tests.servers import PostgresServer, free_port, start_postgres, start_redis  # noqa: E402

__all__ = ["main"]

IMAGESVC = str(Path(sys.executable).parent / "imagesvc")
BOOK = "demo-speculum-fornacum"
PROBE_EVERY = 0.05  # seconds between two probes of a free route (liveness, /img/)
KEYED_EVERY = 0.25  # and of a keyed one
# The phrases of the within-book flood: repeated and hyphenated, the shape that cost ~200x one word.
PHRASES = ['"fire furnace"', '"furnace-fire"', '"slow fire"', '"the furnace"'] * 8


@dataclass
class Node:
    """One ``imagesvc serve`` process tree."""

    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def rss(self) -> dict[int, float]:
        return {p: _rss_mib(p) for p in _tree(self.proc.pid) if p != self.proc.pid}


@dataclass
class Samples:
    """What the probe saw: (time, route, status, milliseconds) per request."""

    rows: list[tuple[float, str, str, float]] = field(default_factory=list)

    def between(self, start: float, end: float, route: str) -> list[tuple[float, str, str, float]]:
        return [r for r in self.rows if start <= r[0] < end and r[1] == route]


def _env(work: Path, pg: PostgresServer, redis_url: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("IMAGESVC_")} | {
        "IMAGESVC_DATA_DIR": str(work / "data"),
        "IMAGESVC_SITE_URL": "https://library.example",
        "IMAGESVC_LOG_LEVEL": "warning",
        "IMAGESVC_CATALOG": "postgres",
        "IMAGESVC_DATABASE_URL": pg.url,
        "IMAGESVC_ACCESS_BACKEND": "redis",
        "IMAGESVC_REDIS_URL": redis_url,
        "IMAGESVC_SERVE_WORKERS": "2",
        "IMAGESVC_WORKERS": "2",
        "IMAGESVC_TEXT_MODEL": "off",
    }


def _cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([IMAGESVC, *args], env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode not in (0, 3):  # 3: ingest finished with refused pages (the demo's broken scans)
        raise SystemExit(f"imagesvc {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def _bearer(created: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {json.loads(created)['key']}"}


def _start_node(env: dict[str, str], work: Path, name: str) -> Node:
    port = free_port()
    log = work / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([IMAGESVC, "serve"], env=env | {"IMAGESVC_PORT": str(port)}, stdout=out, stderr=out)
    return Node(f"http://127.0.0.1:{port}", proc, log)


async def _until(session: aiohttp.ClientSession, url: str, seconds: float, want: int = 200) -> float | None:
    """Seconds until ``url`` answers ``want`` (None when it never did within ``seconds``)."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
            async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as resp:
                await resp.read()
                if resp.status == want:
                    return time.monotonic() - start
        await asyncio.sleep(0.05)
    return None


def _postgres_pids(pg: PostgresServer) -> list[int]:
    """The postmaster and every backend and helper process below it."""
    master = int((pg.datadir / "postmaster.pid").read_text().split()[0])
    return _tree(master)


def _signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


# ---- the steady probe, in a process of its own so the scenarios' own work never delays it -------------------------


def _probe_process(routes: dict[str, tuple[str, dict[str, str]]], stop_at: float, out: Any) -> None:
    async def one(session: aiohttp.ClientSession, name: str, url: str, headers: dict[str, str]) -> None:
        while time.time() < stop_at:
            t0 = time.perf_counter()
            try:
                async with session.get(url, headers=headers) as resp:
                    await resp.read()
                    status = str(resp.status)
            except (TimeoutError, aiohttp.ClientError) as exc:
                status = type(exc).__name__
            out.put((time.time(), name, status, (time.perf_counter() - t0) * 1000))
            await asyncio.sleep(PROBE_EVERY if not headers else KEYED_EVERY)

    async def run() -> None:
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session:
            await asyncio.gather(*(one(session, name, url, h) for name, (url, h) in routes.items()))

    asyncio.run(run())


class Probe:
    """The steady mixed load on every node, collected into ``samples``."""

    def __init__(self, routes: dict[str, tuple[str, dict[str, str]]], seconds: float) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.queue: Any = ctx.Queue()
        self.samples = Samples()
        self.proc = ctx.Process(target=_probe_process, args=(routes, time.time() + seconds, self.queue), daemon=True)
        self.proc.start()

    def drain(self) -> Samples:
        with contextlib.suppress(Exception):
            while True:
                self.samples.rows.append(self.queue.get_nowait())
        return self.samples

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.join(5)


# ---- the scenarios ---------------------------------------------------------------------------------------------


@dataclass
class Phase:
    name: str
    start: float
    end: float
    fault_end: float | None = None  # when the dependency came back
    notes: dict[str, Any] = field(default_factory=dict)


async def _hang(pg: PostgresServer, seconds: float) -> float:
    pids = _postgres_pids(pg)
    _signal_all(pids, signal.SIGSTOP)
    try:
        await asyncio.sleep(seconds)
    finally:
        _signal_all(pids, signal.SIGCONT)
    return time.time()


async def _lock(pg: PostgresServer, seconds: float) -> float:
    import psycopg

    conn = await psycopg.AsyncConnection.connect(pg.url)
    try:
        async with conn.transaction():
            await conn.execute("LOCK TABLE books IN ACCESS EXCLUSIVE MODE")
            await asyncio.sleep(seconds)
    finally:
        await conn.close()
    return time.time()


async def _restart(pg: PostgresServer) -> float:
    await asyncio.to_thread(pg.stop, "fast")
    await asyncio.sleep(2)
    await asyncio.to_thread(pg.start)
    return time.time()


async def _cold_start(pg: PostgresServer, env: dict[str, str], work: Path) -> dict[str, Any]:
    """A node started while PostgreSQL is down: live at once, ready once the database is back."""
    await asyncio.to_thread(pg.stop, "fast")
    node = _start_node(env, work, "cold")
    out: dict[str, Any] = {}
    try:
        async with aiohttp.ClientSession() as session:
            out["live_after_s"] = await _until(session, f"{node.url}/health/live", 60)
            out["ready_while_down"] = "refused"
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(f"{node.url}/health/ready") as resp:
                    out["ready_while_down"] = resp.status
            await asyncio.sleep(5)
            out["exited_while_down"] = node.proc.poll()
            await asyncio.to_thread(pg.start)
            out["ready_after_db_s"] = await _until(session, f"{node.url}/health/ready", 60)
            out["book_after_db_s"] = await _until(session, f"{node.url}/api/books/{BOOK}", 60)
    finally:
        node.stop()
    return out


async def _redis_outage(redis_port: int, stop_redis: Any) -> tuple[float, Any]:
    stop_redis()
    await asyncio.sleep(10)
    _, again = start_redis(port=redis_port)
    return time.time(), again


async def _within_flood(nodes: list[Node], key: str, seconds: float, seed: int) -> dict[str, Any]:
    """12 anonymous and 4 keyed callers repeating a 32-phrase search inside a book; /health timed beside them."""
    rng = random.Random(seed)
    statuses: Counter[str] = Counter()
    health: list[float] = []
    stop = time.monotonic() + seconds

    async def flood(session: aiohttp.ClientSession, headers: dict[str, str]) -> None:
        while time.monotonic() < stop:
            node = rng.choice(nodes)
            query = " ".join(rng.sample(PHRASES, len(PHRASES)))
            try:
                async with session.get(
                    f"{node.url}/api/books/{BOOK}/search", params={"q": query}, headers=headers
                ) as r:
                    await r.read()
                    statuses[str(r.status)] += 1
                    if r.status == 429:  # as a polite client would, but never past the phase's end
                        wait = float(r.headers.get("Retry-After", "1"))
                        await asyncio.sleep(max(0.0, min(wait, stop - time.monotonic())))
            except (TimeoutError, aiohttp.ClientError) as exc:
                statuses[type(exc).__name__] += 1

    async def watch(session: aiohttp.ClientSession) -> None:
        while time.monotonic() < stop:
            for node in nodes:
                t0 = time.perf_counter()
                with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                    async with session.get(f"{node.url}/health") as r:
                        await r.read()
                health.append((time.perf_counter() - t0) * 1000)
            await asyncio.sleep(PROBE_EVERY)

    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session:
        anonymous = [flood(session, {}) for _ in range(12)]  # one address: loopback
        keyed = [flood(session, {"Authorization": f"Bearer {key}"}) for _ in range(4)]
        await asyncio.gather(watch(session), *anonymous, *keyed)
    return {
        "health_p50_ms": round(_pct(health, 0.5), 1),
        "health_p99_ms": round(_pct(health, 0.99), 1),
        "searches": dict(statuses),
    }


async def _held_archives(nodes: list[Node], key: str, count: int) -> dict[str, Any]:
    """``count`` archives whose readers take the head and stall; RSS with them open and after they close."""
    before = {n.url: sum(n.rss().values()) for n in nodes}
    units_before = await _usage(nodes[0], key)
    socks: list[socket.socket] = []
    heads: Counter[str] = Counter()
    for i in range(count):
        node = nodes[i % len(nodes)]
        host, port = node.url.removeprefix("http://").split(":")
        sock = socket.create_connection((host, int(port)))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(
            f"GET /api/books/{BOOK}/archive?tier=display HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Bearer {key}\r\n\r\n".encode()
        )
        socks.append(sock)
    await asyncio.sleep(5)
    for sock in socks:
        sock.settimeout(5)
        with contextlib.suppress(OSError):
            heads[sock.recv(64).split(b"\r\n", 1)[0].decode(errors="replace")] += 1
    await asyncio.sleep(10)
    held = {n.url: sum(n.rss().values()) for n in nodes}
    for sock in socks:
        sock.close()
    await asyncio.sleep(10)
    after = {n.url: sum(n.rss().values()) for n in nodes}
    units_after = await _usage(nodes[0], key)
    return {
        "heads": dict(heads),
        "rss_mib_before": {u: round(v) for u, v in before.items()},
        "rss_mib_held": {u: round(v) for u, v in held.items()},
        "rss_mib_after": {u: round(v) for u, v in after.items()},
        "units_charged": round(units_after - units_before, 3),
    }


async def _usage(node: Node, key: str) -> float:
    """The image units this key was charged so far, exact (the key's usage meter)."""
    auth = {"Authorization": f"Bearer {key}"}
    url = f"{node.url}/api/dataset/v1/usage"
    async with aiohttp.ClientSession() as session, session.get(url, headers=auth) as resp:
        resp.raise_for_status()
        body = await resp.json()
    return sum(row["units_exact"] for row in body["usage"] if row["pool"] == "images")


# ---- the report ------------------------------------------------------------------------------------------------


def _stats(rows: list[tuple[float, str, str, float]]) -> str:
    if not rows:
        return "no answers"
    ms = [r[3] for r in rows]
    codes = Counter(r[2] for r in rows)
    return f"p50 {_pct(ms, 0.5):7.1f}  p99 {_pct(ms, 0.99):7.1f}  max {max(ms):8.1f} ms  " + ", ".join(
        f"{k}: {v}" for k, v in sorted(codes.items())
    )


def _report(phase: Phase, samples: Samples, routes: list[str]) -> None:
    print(f"\n== {phase.name} ({phase.end - phase.start:.0f} s) {json.dumps(phase.notes) if phase.notes else ''}")
    for route in routes:
        print(f"  {route:<12} {_stats(samples.between(phase.start, phase.end, route))}")
    if phase.fault_end is not None:
        during = [r for r in samples.rows if phase.start <= r[0] < phase.fault_end and r[1].startswith("book")]
        if during:
            print(f"  catalog routes during the fault: longest answer {max(r[3] for r in during):.0f} ms")
        back = [r for r in samples.rows if r[0] >= phase.fault_end and r[1].startswith("book") and r[2] == "200"]
        first = min((r[0] + r[3] / 1000 for r in back), default=None)
        print(
            "  first catalog 200 after the fault ended: "
            + (f"{first - phase.fault_end:.2f} s" if first is not None else "none")
        )


async def _run(args: argparse.Namespace, work: Path) -> None:
    pg, stop_pg = start_postgres(work / "pg")
    redis_url, stop_redis = start_redis()
    redis_port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    nodes: list[Node] = []
    probe: Probe | None = None
    try:
        env = _env(work, pg, redis_url)
        t0 = time.monotonic()
        _cli(env, "demo", "--quiet")
        print(f"demo library ingested into PostgreSQL in {time.monotonic() - t0:.0f} s")
        key = json.loads(_cli(env, "keys", "create", "--tier", "enterprise", "--json"))["key"]
        nodes = [_start_node(env, work, f"node-{n}") for n in "ab"]
        async with aiohttp.ClientSession() as session:
            for node in nodes:
                if await _until(session, f"{node.url}/health", 120) is None:
                    raise SystemExit(f"a node did not come up: see {node.log}")
            async with session.get(f"{nodes[0].url}/api/books/{BOOK}") as resp:
                book = await resp.json()
        page = next(p for p in book["pages"] if "image_thumb" in p)
        img_path = "/img/" + page["image_thumb"].split("/img/", 1)[1]
        routes: dict[str, tuple[str, dict[str, str]]] = {}
        for n, node in enumerate(nodes):
            # A key of its own per keyed route: one probe every 250 ms stays within an enterprise key's 1,000/min.
            book_key, image_key = (_bearer(_cli(env, "keys", "create", "--tier", "enterprise", "--json")) for _ in "ab")
            routes[f"live-{n}"] = (f"{node.url}/health/live", {})
            routes[f"img-{n}"] = (f"{node.url}{img_path}", {})
            routes[f"book-{n}"] = (f"{node.url}/api/books/{BOOK}", book_key)
            routes[f"image-{n}"] = (f"{node.url}/api/image?book={BOOK}&page={page['page']}&tier=thumb", image_key)
        total = args.baseline + args.hang + args.long_hang + args.lock + 300
        probe = Probe(routes, total + 600)
        names = list(routes)
        phases: list[Phase] = []

        async def phase(name: str, fault: Any, quiet: float = 10) -> Phase:
            start = time.time()
            result = await fault
            p = Phase(name, start, 0.0)
            if isinstance(result, float):
                p.fault_end = result
            elif isinstance(result, dict):
                p.notes = result
            await asyncio.sleep(quiet)
            p.end = time.time()
            phases.append(p)
            _report(p, probe.drain(), names)  # type: ignore[union-attr]
            return p

        await phase("baseline", asyncio.sleep(args.baseline), quiet=0)
        if args.hang:
            await phase(f"hang {args.hang:g} s", _hang(pg, args.hang))
        if args.long_hang:
            await phase(f"hang {args.long_hang:g} s", _hang(pg, args.long_hang))
        if args.lock:
            await phase(f"lock {args.lock:g} s", _lock(pg, args.lock))
        await phase("restart", _restart(pg))
        await phase("cold-start", _cold_start(pg, env, work))

        async def redis_phase() -> float:
            nonlocal stop_redis
            back, stop_redis = await _redis_outage(redis_port, stop_redis)
            return back

        await phase("redis stopped 10 s", redis_phase())
        if args.flood:
            await phase("within-flood", _within_flood(nodes, key, args.flood, args.seed))
        holder = json.loads(_cli(env, "keys", "create", "--tier", "enterprise", "--json"))["key"]  # its own limits
        await phase("held-archives", _held_archives(nodes, holder, args.archives))
        alive = {n.url: n.proc.poll() is None for n in nodes}
        print(f"\nnodes still running at the end: {alive}")
    finally:
        if probe is not None:
            probe.stop()
        for node in nodes:
            node.stop()
        stop_redis()
        stop_pg()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=float, default=20)
    parser.add_argument("--hang", type=float, default=60)
    parser.add_argument("--long-hang", type=float, default=150)
    parser.add_argument("--lock", type=float, default=20)
    parser.add_argument("--flood", type=float, default=30)
    parser.add_argument("--archives", type=int, default=400)
    parser.add_argument("--seed", type=int, default=43)
    parser.add_argument("--quick", action="store_true", help="short phases: a smoke run of every scenario")
    args = parser.parse_args()
    if args.quick:
        args.baseline, args.hang, args.long_hang, args.lock, args.flood, args.archives = 5, 8, 0, 5, 10, 40
    print(f"faults: seed {args.seed}, host {os.uname().nodename}, {os.cpu_count()} cores, load {os.getloadavg()}")
    with tempfile.TemporaryDirectory(prefix="imagesvc-faults-") as tmp:
        asyncio.run(_run(args, Path(tmp)))


if __name__ == "__main__":
    main()
