"""How long ``imagesvc serve --workers 2`` takes to stop, per ordering of kills and signals; and what signing costs
when the C2PA fast paths are off (another c2pa-python version: c2pa-python's public ``Builder.sign`` only).

Run: ``.venv/bin/python benchmarks/serve_stop.py [--repeat 5] [--drain 5] [--signatures 200]``.

Stop times: a server on an empty data dir (the demo library is not needed to start or stop), IMAGESVC_SHUTDOWN_TIMEOUT
``--drain``; each ordering ``--repeat`` times; the time from the last signal until the master has exited, and whether
any of its processes outlived it. The reference is a plain SIGTERM to a server at rest, in the same run.

Signing: ``sign_delivery`` of the demo library's largest display tier with its XMP note, on one thread, first with
the fast paths (box-hashed) and then with them turned off, in one process; milliseconds a signature and the ratio.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.servers import descendants, free_port  # noqa: E402


def _start(data: Path, drain: int) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGESVC_")}
    env |= {"IMAGESVC_DATA_DIR": str(data), "IMAGESVC_PORT": str(port), "IMAGESVC_SHUTDOWN_TIMEOUT": str(drain)}
    cmd = [sys.executable, "-m", "imagesvc.cli", "serve", "--workers", "2"]
    return subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL), port


def _up(proc: subprocess.Popen[bytes], port: int) -> None:
    import urllib.request

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                if len(descendants(proc.pid)) >= 2:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the server did not come up")


def _at_rest(proc: subprocess.Popen[bytes], port: int) -> None:
    _up(proc, port)
    proc.send_signal(signal.SIGTERM)


def _worker_killed(delay: float) -> Callable[[subprocess.Popen[bytes], int], None]:
    def order(proc: subprocess.Popen[bytes], port: int) -> None:
        _up(proc, port)
        os.kill(min(descendants(proc.pid)), signal.SIGKILL)
        time.sleep(delay)
        proc.send_signal(signal.SIGTERM)

    return order


def _starting(proc: subprocess.Popen[bytes], _port: int) -> None:
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)


def _twice(sig: signal.Signals) -> Callable[[subprocess.Popen[bytes], int], None]:
    def order(proc: subprocess.Popen[bytes], port: int) -> None:
        _up(proc, port)
        proc.send_signal(sig)
        time.sleep(0.2)
        proc.send_signal(sig)

    return order


ORDERINGS = {
    "SIGTERM at rest (reference)": _at_rest,
    "SIGKILL a worker, SIGTERM 0.0 s later": _worker_killed(0.0),
    "SIGKILL a worker, SIGTERM 0.6 s later": _worker_killed(0.6),
    "SIGTERM 1 s into start-up": _starting,
    "SIGTERM twice": _twice(signal.SIGTERM),
    "SIGINT twice": _twice(signal.SIGINT),
}


def stop_times(repeat: int, drain: int) -> None:
    print(f"stop times of `imagesvc serve --workers 2`, drain {drain} s, {repeat} runs each")
    print(f"{'ordering':42} {'median s':>9} {'max s':>7} {'exit':>6} {'left':>5}  ratio to reference")
    reference = None
    with tempfile.TemporaryDirectory() as tmp:
        for name, order in ORDERINGS.items():
            times, codes, left = [], set(), 0
            for _ in range(repeat):
                proc, port = _start(Path(tmp) / "data", drain)
                family: set[int] = set()
                order(proc, port)
                signalled = time.monotonic()
                family |= descendants(proc.pid)
                codes.add(proc.wait(timeout=drain + 60))
                times.append(time.monotonic() - signalled)
                time.sleep(0.3)
                left += sum(Path(f"/proc/{pid}").exists() for pid in family)
            median = statistics.median(times)
            reference = reference or median
            print(
                f"{name:42} {median:9.2f} {max(times):7.2f} {','.join(map(str, sorted(codes))):>6} {left:5d}"
                f"  {median / reference:.2f}"
            )


def signing(signatures: int) -> None:
    from imagesvc.imaging.xmp import build_xmp
    from imagesvc.provenance import Delivery, c2pa_native
    from imagesvc.provenance.credentials import ensure_local_ca
    from imagesvc.provenance.sign import sign_delivery
    from imagesvc.serving import tune_malloc
    from tests.library import build_library

    tune_malloc()
    with tempfile.TemporaryDirectory() as tmp:
        _, data, _ = build_library(Path(tmp))
        display = [p for p in (data / "store" / "pub").rglob("*display*") if p.is_file()]
        stored = max(display or (data / "store" / "pub").rglob("*.jpg"), key=lambda p: p.stat().st_size).read_bytes()
        paths = ensure_local_ca(data / "c2pa", "bench")
        delivery = Delivery("a.jpg", "0" * 64, True, "k1", "2026-01-01", "images", "inst", "ed", "https://x", "site")
        xmp = build_xmp({"requester": "k1"})

        def per_signature() -> float:
            for _ in range(10):
                sign_delivery(stored, xmp, delivery, paths, ("key", "etag", len(stored)))
            started = time.perf_counter()
            for _ in range(signatures):
                sign_delivery(stored, xmp, delivery, paths, ("key", "etag", len(stored)))
            return (time.perf_counter() - started) / signatures * 1000

        fast = per_signature()
        c2pa_native.turn_off("benchmark: fast paths off")
        slow = per_signature()
    print(f"sign_delivery, {len(stored):,}-byte display tier, {signatures} signatures each (one thread)")
    print(f"  fast path (box-hashed):        {fast:6.2f} ms")
    print(f"  fast paths off (Builder.sign): {slow:6.2f} ms   {slow / fast:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--drain", type=int, default=5)
    parser.add_argument("--signatures", type=int, default=200)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    stop_times(args.repeat, args.drain)
    signing(args.signatures)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
