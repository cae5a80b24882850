"""Accounting cost per delivery on SQLite and Redis (reserve + commit for capped callers, one meter record for
uncapped ones), against a bare round trip measured alongside.

Run: ``.venv/bin/python benchmarks/access.py [--ops 3000] [--callers 64] [--redis-url URL]``. Without ``--redis-url``
it starts a private ``redis-server`` on a free port. Prints a Markdown table of p50/p99 latencies in milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import sqlite3
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import redis.asyncio as aioredis

from imagesvc.access import AccessState, Reservation
from imagesvc.access.redis import RedisAccess
from imagesvc.access.sqlite import SqliteAccess

__all__ = ["main"]

Op = Callable[[int], Awaitable[None]]
_rates: list[float] = []  # operations per second of each _timed run, in order


def _start_redis() -> tuple[str, subprocess.Popen[bytes]]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed; pass --redis-url")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return f"redis://127.0.0.1:{port}/0", proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("redis-server did not start")


async def _timed(op: Op, ops: int, callers: int) -> list[float]:
    """Per-operation latencies in ms, ``callers`` tasks sharing ``ops`` operations."""
    samples: list[float] = []

    async def caller(who: int) -> None:
        for i in range(who, ops, callers):
            start = time.perf_counter()
            await op(i)
            samples.append((time.perf_counter() - start) * 1000)

    start = time.perf_counter()
    await asyncio.gather(*(caller(c) for c in range(callers)))
    _rates.append(ops / (time.perf_counter() - start))
    return samples


def _row(name: str, samples: list[float], reference: float) -> str:
    cuts = statistics.quantiles(samples, n=100)
    p50, p99 = statistics.median(samples), cuts[98]
    return f"| {name} | {len(samples)} | {p50:.3f} | {p99:.3f} | {_rates[-1]:,.0f} | {p50 / reference:.1f}x |"


def _accounting(access: AccessState, subjects: int) -> Op:
    async def op(i: int) -> None:
        got = await access.reserve(f"ip:198.51.100.{i % subjects}", "images", 1, 10**9)
        assert isinstance(got, Reservation)
        await access.commit(got)

    return op


def _metering(access: AccessState, subjects: int) -> Op:
    """What a delivery to a paid or exempt caller costs: one meter record, written by group commit."""

    async def op(i: int) -> None:
        await access.record(f"key:bench{i % subjects}", "images", 1)

    return op


async def _fill_day(access: AccessState, subject: str) -> None:
    """Give ``subject`` one committed bucket in every minute of the last 24 h: the most a reserve ever sums."""
    now = time.time()
    for minute in range(1, 1440):
        got = await access.reserve(subject, "images", 1, None, now - minute * 60)
        assert isinstance(got, Reservation)
        await access.commit(got, now=now - minute * 60)


async def _bench(args: argparse.Namespace, redis_url: str, folder: Path) -> list[str]:
    rows: list[str] = []
    # References: the cheapest round trip each design has to make anyway.
    con = sqlite3.connect(folder / "ref.sqlite3", check_same_thread=False)
    thread = ThreadPoolExecutor(1)
    loop = asyncio.get_running_loop()

    async def select_one(_: int) -> None:
        await loop.run_in_executor(thread, lambda: con.execute("SELECT 1").fetchone())

    client = aioredis.Redis.from_url(redis_url)

    async def ping(_: int) -> None:
        await client.ping()

    backends: list[tuple[str, AccessState, Op]] = [
        ("sqlite", SqliteAccess(folder / "access.sqlite3"), select_one),
        ("redis", RedisAccess(redis_url, prefix=f"bench:{time.time_ns()}:"), ping),
    ]
    for name, access, ref_op in backends:
        await _timed(ref_op, 200, 1)  # warm up
        ref_single = statistics.median(await _timed(ref_op, args.ops, 1))
        single_rate = _rates[-1]
        ref_many = statistics.median(await _timed(ref_op, args.ops, args.callers))
        many_rate = _rates[-1]
        ref_label = "SELECT 1 via the thread" if name == "sqlite" else "redis-py PING"
        rows.append(
            f"| {name}: reference, {ref_label}, 1 caller | {args.ops} | {ref_single:.3f} | "
            f"| {single_rate:,.0f} | 1.0x |"
        )
        await _timed(_accounting(access, 1000), 200, 1)
        rows.append(
            _row(f"{name}: reserve+commit, 1 caller", await _timed(_accounting(access, 1000), args.ops, 1), ref_single)
        )
        many = await _timed(_accounting(access, 1000), args.ops, args.callers)
        rows.append(
            f"| {name}: reference, {args.callers} callers | {args.ops} | {ref_many:.3f} | | {many_rate:,.0f} | 1.0x |"
        )
        rows.append(_row(f"{name}: reserve+commit, {args.callers} callers", many, ref_many))
        for callers in (1, args.callers):
            record = await _timed(_metering(access, 1000), args.ops, callers)
            reference = ref_single if callers == 1 else ref_many
            who = "1 caller" if callers == 1 else f"{callers} callers"
            rows.append(_row(f"{name}: metered delivery (uncapped caller), {who}", record, reference))
        await _fill_day(access, "ip:192.0.2.99")

        async def busy(_: int, access: AccessState = access) -> None:
            got = await access.reserve("ip:192.0.2.99", "images", 1, 10**9)
            assert isinstance(got, Reservation)
            await access.commit(got)

        rows.append(
            _row(
                f"{name}: reserve+commit, subject with 1,440 live buckets",
                await _timed(busy, args.ops // 3, 1),
                ref_single,
            )
        )
        await access.close()
    await client.aclose()
    thread.shutdown()
    con.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=3000, help="operations per measurement")
    parser.add_argument("--callers", type=int, default=64, help="concurrent callers in the many-callers runs")
    parser.add_argument("--redis-url", default="", help="use this Redis instead of starting one")
    args = parser.parse_args()
    proc = None
    url = args.redis_url
    if not url:
        url, proc = _start_redis()
    try:
        with tempfile.TemporaryDirectory() as folder:
            rows = asyncio.run(_bench(args, url, Path(folder)))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait()
    print("| measurement | ops | p50 ms | p99 ms | ops/s | p50 / reference |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
