"""``imagesvc download``: books (named, from a list file, or every book the dataset lists) into a folder that is a
BagIt bag, through the archive route, resumable and within the key's limits.

Each book's pages are asked for as TAR archives of up to ``--pages`` pages (one request each), read as they stream:
every member is checked against the SHA-256 its pax header carries, written under ``data/<slug>/`` and recorded in
``.imagesvc-download/journal.jsonl`` once on disk. A run that was killed starts again from the journal: files recorded
and still matching their digest are not fetched again; the ranges left are asked for with ``from``/``to``. Workers
(``--concurrency``) share one ``Pacer``. At the end the bag's manifests are written from the journal and the bag is
validated with the ``bagit`` library; every failure is listed, and the exit status is 1 if there was any.

Names come from the server and are not trusted: a listed slug must match the catalog's slug pattern, and a member
must be a regular file named by plain relative parts whose target resolves inside the bag's ``data/<slug>/``;
anything else stops that book with a failure, and nothing is written for it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any

from imagesvc.bulk.pacing import Pacer

__all__ = ["add_parser", "run"]

JOURNAL = ".imagesvc-download/journal.jsonl"
SHA256_PAX = "IMAGESVC.sha256"
ATTEMPTS = 3


def _slug_pattern() -> re.Pattern[str]:
    """The catalog's slug pattern, from the manifest schema (the one place it is defined)."""
    schema = resources.files("imagesvc.ingest").joinpath("manifest.schema.json").read_text(encoding="utf-8")
    return re.compile(json.loads(schema)["$defs"]["slug"]["pattern"])


SLUG = _slug_pattern()


class UnsafeName(RuntimeError):
    """The server named a book or file that would be written outside the bag: nothing of it is written."""


@dataclass
class Job:
    slug: str
    first: int
    last: int


@dataclass
class State:
    """What the run knows: files recorded in the journal, failures, and progress figures (guarded by ``lock``)."""

    dest: Path
    files: dict[str, dict[str, Any]] = field(default_factory=dict)  # bag path -> {sha256, bytes, book, page}
    unavailable: set[tuple[str, int]] = field(default_factory=set)
    failures: list[str] = field(default_factory=list)
    total: int = 0
    done: int = 0
    bytes: int = 0
    started: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, entry: dict[str, Any]) -> None:
        with self.lock:
            with open(self.dest / JOURNAL, "a", encoding="utf-8") as journal:
                journal.write(json.dumps(entry) + "\n")
                journal.flush()
                os.fsync(journal.fileno())
            if entry.get("image_unavailable"):
                self.unavailable.add((entry["book"], entry["page"]))
            else:
                self.files[entry["path"]] = entry
                self.done += 1
                self.bytes += entry["bytes"]


def _load(dest: Path) -> State:
    """The journal of an earlier run, keeping only files still on disk with the recorded digest."""
    state = State(dest)
    (dest / JOURNAL).parent.mkdir(parents=True, exist_ok=True)
    path = dest / JOURNAL
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line cut by the kill
            if entry.get("image_unavailable"):
                state.unavailable.add((entry["book"], entry["page"]))
                continue
            file = dest / entry["path"]
            intact = file.is_file() and file.stat().st_size == entry["bytes"]
            if intact and hashlib.sha256(file.read_bytes()).hexdigest() == entry["sha256"]:
                state.files[entry["path"]] = entry
    return state


class Client:
    """GETs against the REST base with the key, paced; JSON answers or streamed archives."""

    def __init__(self, base: str, key: str, pacer: Pacer) -> None:
        self.base, self.key, self.pacer = base.rstrip("/"), key, pacer

    def open(self, path: str, params: dict[str, Any]) -> Any:
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        for _ in range(ATTEMPTS * 4):
            self.pacer.wait()
            request = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.key}"})
            try:
                response = urllib.request.urlopen(request, timeout=120)
            except urllib.error.HTTPError as exc:
                self.pacer.observe(exc.headers, exc.code)
                if exc.code == 429 and exc.headers.get("RateLimit", "").startswith('"requests"'):
                    continue  # the request limit: wait as told and go on
                body = exc.read().decode("utf-8", "replace")
                try:
                    message = json.loads(body).get("message", body)
                except ValueError:
                    message = body
                raise RuntimeError(f"HTTP {exc.code} for {path}: {message}") from None
            self.pacer.observe(response.headers, response.status)
            return response
        raise RuntimeError(f"still refused (429) after {ATTEMPTS * 4} tries: {path}")

    def json(self, path: str, params: dict[str, Any]) -> dict[str, Any]:
        with self.open(path, params) as response:
            return json.loads(response.read())


def _pages(client: Client, book: str | None) -> dict[str, list[tuple[int, bool]]]:
    """``{slug: [(page, has image)]}`` from the dataset listing, for one book or all."""
    out: dict[str, list[tuple[int, bool]]] = {}
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 1000, **({"book_id": book} if book else {})}
        if cursor:
            params["cursor"] = cursor
        body = client.json("/dataset/images", params)
        for item in body["items"]:
            slug = item["slug"]
            if not isinstance(slug, str) or not SLUG.fullmatch(slug):
                raise UnsafeName(f"the dataset listing names a book {slug!r}, which is not a slug; nothing was fetched")
            out.setdefault(slug, []).append((item["page"], not item.get("image_unavailable")))
        cursor = body["next_cursor"]
        if not cursor:
            return out


def _jobs(state: State, pages: dict[str, list[tuple[int, bool]]], tier: str, clean: bool, size: int) -> list[Job]:
    """Ranges of pages still to fetch, at most ``size`` pages each (pages done or known to have no image skipped)."""
    suffix = f"-{tier}{'-clean' if clean else ''}.jpg"
    jobs: list[Job] = []
    for slug, numbers in pages.items():
        todo = [
            n
            for n, has_image in numbers
            if has_image
            and f"data/{slug}/{slug}-p{n}{suffix}" not in state.files
            and (slug, n) not in state.unavailable
        ]
        state.unavailable.update((slug, n) for n, has_image in numbers if not has_image)  # listed, not invented
        state.total += sum(1 for n, has_image in numbers if has_image)
        state.done += sum(1 for n, has_image in numbers if has_image) - len(todo)
        run: list[int] = []
        for n in todo:
            if run and (n != run[-1] + 1 or len(run) == size):
                jobs.append(Job(slug, run[0], run[-1]))
                run = []
            run.append(n)
        if run:
            jobs.append(Job(slug, run[0], run[-1]))
    return jobs


def _fetch(client: Client, state: State, job: Job, tier: str, clean: bool) -> None:
    """One range, retried from the first page not yet on disk when the stream breaks."""
    first = job.first
    for attempt in range(ATTEMPTS):
        params = {"tier": tier, "format": "tar", "from": first, "to": job.last, **({"clean": 1} if clean else {})}
        try:
            with client.open(f"/books/{job.slug}/archive", params) as response:
                stopped = _unpack(state, job.slug, response)
            if stopped:
                with state.lock:
                    state.failures.append(f"{job.slug} pages {stopped[0]}-{job.last}: {stopped[1]}")
            return
        except (OSError, tarfile.TarError, urllib.error.URLError) as exc:
            done = [e["page"] for e in list(state.files.values()) if e["book"] == job.slug]
            first = max([first, *[p + 1 for p in done if first <= p <= job.last]])
            if first > job.last:
                return
            if attempt == ATTEMPTS - 1:
                with state.lock:
                    state.failures.append(f"{job.slug} pages {first}-{job.last}: {exc}")
        except (RuntimeError, ValueError) as exc:  # refused, an unsafe name, a malformed listing of missing pages
            with state.lock:
                state.failures.append(f"{job.slug} pages {first}-{job.last}: {exc}")
            return


def _unpack(state: State, slug: str, response: Any) -> tuple[int, str] | None:
    """Write and record each image member as it arrives; returns (page, reason) when the archive stopped short."""
    stopped = None
    with tarfile.open(fileobj=response, mode="r|") as archive:
        for member in archive:
            name = _inner_name(member)
            handle = archive.extractfile(member)
            data = handle.read() if handle is not None else b""
            digest = hashlib.sha256(data).hexdigest()
            if member.pax_headers.get(SHA256_PAX) != digest:
                raise tarfile.TarError(f"{member.name}: the bytes received do not match their SHA-256")
            if name.startswith("data/"):
                path = f"data/{slug}/{name.removeprefix('data/')}"
                target = _inside(state.dest / "data" / slug, path.removeprefix(f"data/{slug}/"), member.name)
                page = _page_of(name, member.name)
                target.parent.mkdir(parents=True, exist_ok=True)
                partial = target.with_name(target.name + ".part")
                partial.write_bytes(data)
                os.replace(partial, target)
                state.record({"path": path, "sha256": digest, "bytes": len(data), "book": slug, "page": page})
            elif name == "image-unavailable.txt":
                for line in data.decode().splitlines():
                    number = int(line.split("\t", 1)[0])
                    state.record({"book": slug, "page": number, "image_unavailable": True})
            elif name == "RESUME.txt":
                first = data.decode().splitlines()[0]
                page = int(first.split("stops before page ", 1)[1].split(" ", 1)[0])
                stopped = (page, first.split(": ", 1)[1] if ": " in first else first)
    return stopped


def _inner_name(member: tarfile.TarInfo) -> str:
    """The member's path below the archive's top folder; ``UnsafeName`` for anything but a regular file named by
    plain relative parts (no ``..``, no absolute or empty part, no backslash)."""
    name = member.name
    parts = name.split("/")
    if (
        not member.isfile()
        or "\\" in name
        or len(parts) < 2
        or any(part in ("", ".", "..") for part in parts)
        or PurePosixPath(name).is_absolute()
    ):
        raise UnsafeName(f"the archive holds {name!r}, which is not a plain file name inside the bag; stopped there")
    return "/".join(parts[1:])


def _inside(folder: Path, relative: str, shown: str) -> Path:
    """``folder / relative``, checked to resolve inside ``folder`` (links included)."""
    target = (folder / relative).resolve()
    if not target.is_relative_to(folder.resolve()):
        raise UnsafeName(f"the archive's {shown!r} would be written outside {folder}; stopped there")
    return target


def _page_of(name: str, shown: str) -> int:
    try:
        return int(name.rsplit("-p", 1)[1].split("-", 1)[0])
    except (IndexError, ValueError):
        raise UnsafeName(f"the archive's {shown!r} names no page; stopped there") from None


def _finish(state: State, base: str) -> None:
    """Write the bag's tag files from the journal (digests of the bytes on disk) and validate it with bagit."""
    import bagit

    dest = state.dest
    entries = sorted(state.files.values(), key=lambda e: e["path"])
    (dest / "bagit.txt").write_bytes(b"BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n")
    (dest / "manifest-sha256.txt").write_text("".join(f"{e['sha256']}  {e['path']}\n" for e in entries))
    size = sum(e["bytes"] for e in entries)
    info = [
        ("Source-Organization", base),
        ("Bagging-Date", time.strftime("%Y-%m-%d", time.gmtime())),
        ("Payload-Oxum", f"{size}.{len(entries)}"),
        ("Image-Unavailable", ",".join(f"{b}:{p}" for b, p in sorted(state.unavailable)) or "none"),
    ]
    (dest / "bag-info.txt").write_text("".join(f"{k}: {v}\n" for k, v in info))
    tags = ["bagit.txt", "bag-info.txt", "manifest-sha256.txt"]
    digests = {t: hashlib.sha256((dest / t).read_bytes()).hexdigest() for t in tags}
    (dest / "tagmanifest-sha256.txt").write_text("".join(f"{d}  {t}\n" for t, d in digests.items()))
    bagit.Bag(str(dest)).validate()


def _progress(state: State, quiet: bool, final: bool = False) -> None:
    if quiet:
        return
    elapsed = time.monotonic() - state.started
    fetched = state.done
    rate = state.bytes / elapsed / 1e6 if elapsed else 0.0
    left = state.total - fetched
    pace = (fetched / elapsed) if elapsed and fetched else 0.0
    eta = f"{left / pace:5.0f} s" if pace else "    ?"
    line = f"\r{fetched}/{state.total} images  {state.bytes / 1e6:8.1f} MB  {rate:6.1f} MB/s  ETA {eta}"
    sys.stderr.write(line + ("\n" if final else ""))
    sys.stderr.flush()


def run(args: argparse.Namespace) -> int:
    """The ``download`` command; returns the exit status (0 complete and valid, 1 failures, 2 usage)."""
    key = args.key or os.environ.get("IMAGESVC_KEY")
    if not key:
        print("imagesvc download: a key is needed (--key or IMAGESVC_KEY)", file=sys.stderr)
        return 2
    if args.url:
        base = args.url
    else:
        from imagesvc.client import default_url

        base = default_url(os.environ)
    base = base.rstrip("/").removesuffix("/mcp")
    books = list(args.books)
    if args.list:
        books += [line.strip() for line in Path(args.list).read_text().splitlines() if line.strip()]
    if not books and not args.all:
        print("imagesvc download: name books, --list FILE or --all", file=sys.stderr)
        return 2
    dest = Path(args.dest)
    state = _load(dest)
    quiet = args.quiet or args.json
    pacer = Pacer(args.max_wait, say=lambda text: None if quiet else print(f"\n{text}", file=sys.stderr))
    client = Client(base, key, pacer)
    pages: dict[str, list[tuple[int, bool]]] = {}
    try:
        for book in books or [None]:
            pages.update(_pages(client, book))
    except RuntimeError as exc:
        state.failures.append(str(exc))
    jobs = _jobs(state, pages, args.tier, args.clean, args.pages)
    stop = threading.Event()

    def ticker() -> None:
        while not stop.wait(0.5):
            _progress(state, quiet)

    thread = threading.Thread(target=ticker, daemon=True)
    thread.start()
    with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
        list(pool.map(lambda job: _fetch(client, state, job, args.tier, args.clean), jobs))
    stop.set()
    _progress(state, quiet, final=True)
    valid = False
    try:
        _finish(state, base)
        valid = True
    except Exception as exc:  # bagit's own errors: the bag is reported as not valid
        state.failures.append(f"bag not valid: {exc}")
    summary = {
        "dest": str(dest),
        "images": len(state.files),
        "expected": state.total,
        "bytes": sum(e["bytes"] for e in state.files.values()),
        "image_unavailable": len(state.unavailable),
        "requests_refused": pacer.refusals,
        "seconds": round(time.monotonic() - state.started, 2),
        "valid": valid,
        "failures": state.failures,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{summary['images']}/{state.total} images in {dest} ({'valid bag' if valid else 'NOT a valid bag'})")
    for failure in state.failures:
        print(f"imagesvc download: failed: {failure}", file=sys.stderr)
    return 1 if state.failures or len(state.files) < state.total else 0


def add_parser(sub: Any) -> None:
    """The ``download`` subcommand of ``imagesvc``."""
    p = sub.add_parser(
        "download",
        help="download books' page images into a BagIt bag (resumable)",
        description="Download page images as a BagIt bag through the archive route: resumable after a kill, paced "
        "within the key's request limit (RateLimit headers, Retry-After), validated with bagit at the end.",
        epilog="exit status: 0 every image fetched and the bag valid; 1 failures (each listed); 2 bad usage.",
    )
    p.add_argument("books", nargs="*", help="book ids or slugs")
    p.add_argument("--list", help="a file of book ids or slugs, one a line")
    p.add_argument("--all", action="store_true", help="every book the dataset listing shows the key")
    p.add_argument("--dest", required=True, help="the bag folder (created; an existing one is resumed)")
    p.add_argument("--tier", default="full", choices=["full", "display", "thumb"])
    p.add_argument("--clean", action="store_true", help="clean copies (full-tier keys)")
    p.add_argument("--pages", type=int, default=100, help="pages per archive request (default 100)")
    p.add_argument("--concurrency", type=int, default=4, help="archives fetched at once (default 4)")
    p.add_argument("--max-wait", type=float, default=60.0, help="cap on a Retry-After wait, seconds (default 60)")
    p.add_argument("--url", default=os.environ.get("IMAGESVC_URL"), help="server (REST base or MCP URL)")
    p.add_argument("--key", default=None, help="API key (or IMAGESVC_KEY)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress line")
