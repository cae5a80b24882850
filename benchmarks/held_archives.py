"""Archives opened and never read: a worker's resident memory while 400 are held and after they close, and what
they were charged.

Run: ``.venv/bin/python benchmarks/held_archives.py [--pages 40] [--archives 400] [--work DIR]``.

It generates a book of ``--pages`` scan-sized pages (``bulk.make_book``), ingests it, and serves it with one
``imagesvc serve`` worker (hot cache at its default). One enterprise key opens ``--archives`` full-tier ZIP
archives over raw sockets with a 4 KiB receive buffer, reads each response head and then nothing. It prints the
answers (200, 429 for the key's cap, 503 for the node's), the worker's resident memory before, while held and after
every socket was reset, and the image units metered for the key, for ``--rounds`` rounds on one server (a second
round that ends where the first did shows nothing accumulates). Twice: with the default caps, then with both caps
raised to the number of archives (every one admitted: the footprint of one held archive).
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bulk import SLUG, keys, make_book, serve

from tests.library import run_ingest, settings_for


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and its children (the serving worker may be either), in MiB."""
    total = 0
    for proc in [pid, *_children(pid)]:
        for line in Path(f"/proc/{proc}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total = max(total, int(line.split()[1]))
    return total / 1024


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def open_archive(port: int, key: str) -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", port))
    target = f"/api/books/{SLUG}/archive?tier=full"
    sock.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        piece = sock.recv(1024)
        if not piece:
            break
        head += piece
    return sock, int(head.split(b" ", 2)[1]) if head else 0


def metered(base: str, key: str) -> int:
    request = urllib.request.Request(base + "/api/dataset/v1/usage", headers={"Authorization": f"Bearer {key}"})
    usage = json.loads(urllib.request.urlopen(request, timeout=10).read())["usage"]
    return sum(row["units"] for row in usage if row["pool"] == "images")


def warm_up(base: str, key: str) -> None:
    """One whole archive read and one cut off, so that what the first delivery and the first hang-up load (the
    signer, c2pa, the error path) is not counted as held."""
    request = urllib.request.Request(
        f"{base}/api/books/{SLUG}/archive?tier=full&to=4", headers={"Authorization": f"Bearer {key}"}
    )
    urllib.request.urlopen(request, timeout=60).read()
    sock, _ = open_archive(int(base.rsplit(":", 1)[1]), key)
    reset(sock)
    time.sleep(3)


def reset(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def measure(data: Path, archives: int, env: dict[str, str], label: str, rounds: int = 1) -> None:
    key = keys(data)["enterprise"]
    proc, base = serve(data, env)
    port = int(base.rsplit(":", 1)[1])
    try:
        warm_up(base, keys(data)["enterprise"])
        before = rss_mb(proc.pid)
        for round in range(1, rounds + 1):
            held: list[socket.socket] = []
            answers: dict[int, int] = {}
            for _ in range(archives):
                sock, status = open_archive(port, key)
                answers[status] = answers.get(status, 0) + 1
                if status == 200:
                    held.append(sock)
                else:
                    sock.close()
            time.sleep(3)  # let every admitted archive fill its buffers and block
            during = rss_mb(proc.pid)
            for sock in held:
                reset(sock)
            time.sleep(3)
            after = rss_mb(proc.pid)
            print(
                f"{label}, round {round}: answers {dict(sorted(answers.items()))}; worker RSS {before:.0f} MiB "
                f"before, {during:.0f} MiB with {len(held)} held (+{during - before:.0f}), {after:.0f} MiB after "
                f"they closed (+{after - before:.0f}); image units metered: {metered(base, key)}"
            )
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=40)
    parser.add_argument("--archives", type=int, default=400)
    parser.add_argument("--work", help="a work folder of an earlier run: its book is reused")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the server (repeatable)")
    parser.add_argument("--only-raised", action="store_true", help="measure only with the caps raised")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of held archives on the same server")
    args = parser.parse_args()
    extra = dict(item.split("=", 1) for item in args.env)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="imagesvc-held-"))
    data = work / "local"
    if not (data / "catalog.sqlite3").exists():
        run_ingest(make_book(work / "src", args.pages), settings_for(data))
    if not args.only_raised:
        measure(data, args.archives, extra, "default caps", args.rounds)
    n = str(args.archives)
    raised = {"IMAGESVC_ARCHIVE_PER_KEY": n, "IMAGESVC_ARCHIVE_PER_NODE": n, **extra}
    measure(data, args.archives, raised, "caps raised", args.rounds)


if __name__ == "__main__":
    main()
