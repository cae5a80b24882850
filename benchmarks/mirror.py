"""Mirroring a library with ``imagesvc download``: its speed against ``curl`` of each book's archive, a mirror killed
three times with a node restart in between, and a sync after pages changed and a book was withdrawn. In one run.

Run: ``.venv/bin/python benchmarks/mirror.py [--books 4] [--pages 40]``.

It generates ``--books`` books of ``--pages`` pages (1000x1400 JPEG masters with grain), ingests them (local store,
SQLite catalog: this script's reduced setting, where the issue's is two nodes, PostgreSQL and S3) and serves them
with one ``imagesvc serve`` node. With an enterprise key (1,000 requests a minute, full tier):

1. After one warming pass, ``curl`` of each book's TAR archive one after another, then one ``curl`` per book at once
   (up to 4, the CLI's concurrency), then ``imagesvc download --all`` into a fresh bag: pages/s of each, and the
   ratio of the CLI to the parallel curls (target >= 0.9).
2. A fresh mirror with a second key, the CLI killed with SIGKILL three times (at 20, 40 and 60% of the pages), the
   node stopped and started again after the second kill, then run to the end: the bag validates, no page is recorded
   twice, and the units the server billed the key (its usage meter) against the images the bag holds.
3. 10 pages changed (their stored digest and the book's source hash, as a re-ingest with new scans would) and one
   book withdrawn: the next run fetches exactly the 10 pages and reports the book.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from imagesvc.catalog import Catalog  # noqa: E402
from imagesvc.catalog.api_keys import create_key  # noqa: E402
from imagesvc.catalog.writes import withdraw_book  # noqa: E402
from tests.library import run_ingest, settings_for  # noqa: E402
from tests.servers import free_port  # noqa: E402

PYTHON = sys.executable


def make_books(root: Path, books: int, pages: int) -> Path:
    rng = np.random.default_rng(7)
    (root / "images").mkdir(parents=True, exist_ok=True)
    entries = []
    for b in range(1, books + 1):
        numbered = []
        for n in range(1, pages + 1):
            grain = rng.normal(225, 14, (350, 250, 3)).clip(0, 255).astype(np.uint8)
            Image.fromarray(grain).resize((1000, 1400), Image.BILINEAR).save(
                root / "images" / f"{b}-{n}.jpg", quality=85
            )
            numbered.append({"number": n, "image": f"images/{b}-{n}.jpg", "ocr": f"Page {n}."})
        entries.append(
            {
                "slug": f"mirror-book-{b}",
                "title": f"Mirror Book {b}",
                "author": "Bench Author",
                "language": "Latin",
                "year": 1600,
                "attribution": {"institution": "Bench Library", "item_url": f"https://bench.example/items/{b}"},
                "pages": numbered,
            }
        )
    manifest = root / "manifest.json"
    manifest.write_text(json.dumps({"version": 1, "books": entries}))
    return manifest


def key(data: Path, label: str) -> str:
    catalog = Catalog(data / "catalog.sqlite3")
    try:
        return create_key(catalog, "enterprise", label)[0]
    finally:
        catalog.close()


def serve(data: Path, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "IMAGESVC_DATA_DIR": str(data), "IMAGESVC_PORT": str(port), "IMAGESVC_LOG_LEVEL": "warning"}
    env["IMAGESVC_SITE_URL"] = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [PYTHON, "-m", "imagesvc.cli", "serve", "--workers", "1"], env=env, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
            return proc
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("the server did not start")


def download(base: str, secret: str, dest: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGESVC_")}
    cmd = [PYTHON, "-m", "imagesvc.cli", "download", "--all", "--dest", str(dest), "--url", f"{base}/api"]
    cmd += ["--key", secret, "--json", "--quiet", *extra]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def journal(dest: Path) -> list[dict]:
    path = dest / ".imagesvc-download" / "journal.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if line.endswith("}") and '"path"' in line]


def billed(base: str, secret: str) -> float:
    request = urllib.request.Request(f"{base}/api/dataset/v1/usage", headers={"Authorization": f"Bearer {secret}"})
    usage = json.loads(urllib.request.urlopen(request, timeout=30).read())["usage"]
    return sum(row["units_exact"] for row in usage if row["pool"] == "images")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--books", type=int, default=4)
    parser.add_argument("--pages", type=int, default=40)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="imagesvc-mirror-"))
    data, total = work / "data", args.books * args.pages
    started = time.monotonic()
    run_ingest(make_books(work / "src", args.books, args.pages), settings_for(data, site_url="http://127.0.0.1"))
    print(f"{args.books} books, {total} pages generated and ingested in {time.monotonic() - started:.0f} s")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    node = serve(data, port)
    try:
        first = key(data, "bench speed")
        auth = ["-H", f"Authorization: Bearer {first}"]
        urls = [f"{base}/api/books/mirror-book-{b}/archive?tier=full&format=tar" for b in range(1, args.books + 1)]
        for url in urls:  # warm: c2pa loaded, every stored object read once (as for both timed runs below)
            subprocess.run(["curl", "-sf", "-o", "/dev/null", *auth, url], check=True)
        start = time.perf_counter()
        for url in urls:
            subprocess.run(["curl", "-sf", "-o", "/dev/null", *auth, url], check=True)
        curl_one = total / (time.perf_counter() - start)
        start = time.perf_counter()
        at_once = [subprocess.Popen(["curl", "-sf", "-o", "/dev/null", *auth, url]) for url in urls[:4]]
        for curl in at_once:
            curl.wait()
        curl_rate = args.pages * len(at_once) / (time.perf_counter() - start)
        proc = download(base, first, work / "speed")
        out, _ = proc.communicate()
        summary = json.loads(out)
        cli_rate = summary["fetched"] / summary["seconds"]
        print(f"1. curl, one archive at a time: {curl_one:.1f} pages/s; one curl per book at once (up to 4, as the "
              f"CLI): {curl_rate:.1f} pages/s; imagesvc download: {cli_rate:.1f} pages/s ({cli_rate / curl_rate:.2f}x "
              f"the parallel curls; exit {proc.returncode}, {summary['requests_refused']} 429s)")  # fmt: skip

        second, dest = key(data, "bench kills"), work / "mirror"
        for kill, share in enumerate((0.2, 0.4, 0.6), 1):
            proc = download(base, second, dest)
            while len(journal(dest)) < share * total and proc.poll() is None:
                time.sleep(0.05)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            if kill == 2:
                node.send_signal(signal.SIGTERM)
                node.wait(timeout=60)
                node = serve(data, port)
        proc = download(base, second, dest)
        out, _ = proc.communicate()
        summary = json.loads(out)
        paths = [e["path"] for e in journal(dest)]
        units = billed(base, second)
        print(f"2. killed 3 times, node restarted once: exit {proc.returncode}, valid {summary['valid']}, "
              f"{len(set(paths))} pages in the bag, {len(paths) - len(set(paths))} recorded twice, "
              f"{units:g} units billed for {len(set(paths))} images held")  # fmt: skip

        catalog = Catalog(data / "catalog.sqlite3")
        try:
            with catalog.transaction() as conn:
                books = [catalog.find_book(f"mirror-book-{b}")["id"] for b in (1, 2)]
                for n in range(1, 11):
                    conn.execute(
                        "UPDATE renditions SET sha256 = ? WHERE tier = 'full'"
                        " AND owner = (SELECT id FROM pages WHERE book_id = ? AND number = ?)",
                        (f"{n:064x}", books[0], n),
                    )
                conn.execute("UPDATE books SET source_hash = 'changed' WHERE id = ?", (books[0],))
                withdraw_book(conn, books[1])
        finally:
            catalog.close()
        proc = download(base, second, dest)
        out, _ = proc.communicate()
        summary = json.loads(out)
        print(f"3. after 10 pages changed and 1 book withdrawn: {summary['fetched']} pages fetched "
              f"({summary['changed']} changed), withdrawn {summary['withdrawn']}, exit {proc.returncode}, "
              f"valid {summary['valid']}, {summary['seconds']} s")  # fmt: skip
    finally:
        node.send_signal(signal.SIGTERM)
        node.wait(timeout=60)
    print(f"work folder: {work}")


if __name__ == "__main__":
    main()
