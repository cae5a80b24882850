"""``imagesvc download``: books (named, by glob, from a list file, a collection, or every book the dataset lists)
into a folder that is a BagIt bag, through the archive route; resumable, kept in sync, within the key's limits.

Each run lists the selected pages (``/dataset/images``) with the digests of the stored images and reads the change
feed after the bag's point. A page is fetched when the bag lacks it or the listing's digest differs from the one it
was fetched under; a book the feed says was withdrawn is reported (and removed with ``--remove-withdrawn``). Pages
go as TAR archives of up to ``--pages`` pages (one request each, ``--concurrency`` at once, at most the key's four
archive slots), read as they stream by ``tarstream`` (bounded, plain files only); each member is checked against
its SHA-256, written (``.part``, then renamed) under ``data/<slug>/`` and recorded in the journal. A broken stream,
a timeout or a 5xx is retried (``--retries``, capped backoff, ``Retry-After`` honoured) from the first page not yet
on disk. A spent image budget ends the run at once; Ctrl-C finishes the member in hand, and a second aborts.
At the end the bag's tag files are written from the journal and the bag is validated; a summary says what
happened (``--json`` too), and the exit status says which outcome (``EXIT``).

Names from the server are not trusted: a slug must match the catalog's slug pattern and a member must be exactly
the file the archive route names for a page asked for; anything else stops that book with a failure.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import fnmatch
import hashlib
import json
import logging
import os
import re
import signal
import sys
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any

import aiohttp

from imagesvc.bulk.pacing import Pacer
from imagesvc.download import feed
from imagesvc.download.journal import Journal, file_digest
from imagesvc.download.net import BudgetSpent, Http, Refused, Transient
from imagesvc.download.tarstream import TarReader, TarRefused

__all__ = ["EXIT", "add_parser", "run"]

SHA256_PAX = "IMAGESVC.sha256"
ARCHIVE_SLOTS = 4  # archives one key may have open (IMAGESVC_ARCHIVE_PER_KEY's default): the pool's upper bound
MAX_TAG = 1 << 20  # a tag file (RESUME.txt, image-unavailable.txt, manifests) larger than this is refused
MAX_LISTED = 5_000_000  # pages one listing may name before the run refuses it as endless
MAX_BOOKS = 1_000_000  # books one catalogue walk (glob, collection) may name
EXIT = {
    "complete": 0,  # every selected page is in the bag, and the bag is valid
    "failures": 1,  # some pages were not fetched (each listed with why), or the bag is not valid
    "usage": 2,  # bad command line, or a dependency missing: nothing was fetched
    "budget_spent": 3,  # the key's image budget ran dry: run again after resume_after_seconds
    "interrupted": 4,  # Ctrl-C: the members in hand were finished and recorded; run again to go on
    "aborted": 130,  # a second Ctrl-C: stopped where it was (the journal holds every file written)
}


def _slug_pattern() -> re.Pattern[str]:
    """The catalog's slug pattern, from the manifest schema (the one place it is defined)."""
    schema = resources.files("imagesvc.ingest").joinpath("manifest.schema.json").read_text(encoding="utf-8")
    return re.compile(json.loads(schema)["$defs"]["slug"]["pattern"])


SLUG = _slug_pattern()


class UnsafeName(ValueError):
    """The server named a book or file the client did not ask for, or one outside the bag: nothing of it is written."""


@dataclass
class Page:
    slug: str
    number: int
    image: bool
    digest: str | None  # the listing's digest of the stored image of the tier asked for
    bytes: int


@dataclass
class Job:
    slug: str
    first: int
    last: int


@dataclass
class Run:
    """The run's options and what it has done so far (one event loop: no locks)."""

    args: argparse.Namespace
    journal: Journal
    http: Http
    log: Any
    quiet: bool  # no progress line
    suffix: str
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    failures: list[str] = field(default_factory=list)
    selected: int = 0
    skipped: int = 0
    changed: int = 0
    fetched: int = 0
    fetched_books: set[str] = field(default_factory=set)
    billed: int = 0
    bytes: int = 0
    listed: dict[tuple[str, int], str | None] = field(default_factory=dict)  # the listing's digest of each page
    budget: BudgetSpent | None = None
    interrupted: bool = False
    started: float = field(default_factory=time.monotonic)

    def say(self, text: str) -> None:
        """On stderr (also under --json, whose summary is on stdout; not under --quiet) and in the --log file."""
        if not self.args.quiet:
            sys.stderr.write(f"\n{text}\n")
            sys.stderr.flush()
        if self.log is not None:
            self.log.write(f"{dt.datetime.now(dt.UTC).isoformat(timespec='seconds')} {text}\n")
            self.log.flush()

    def fail(self, slug: str, first: int, last: int, why: str) -> None:
        pages = f"page {first}" if first == last else f"pages {first}-{last}"
        self.failures.append(f"{slug} {pages}: {why}")
        self.say(f"failed: {slug} {pages}: {why}")

    def path(self, slug: str, number: int) -> str:
        return f"data/{slug}/{slug}-p{number}{self.suffix}"


# ---------------------------------------------------------------------------------------------------- selection


async def _catalogue(http: Http, path: str, params: dict[str, Any]) -> list[str]:
    """Every book slug a catalogue route answers, paged by skip (200 at a time), bounded."""
    slugs: list[str] = []
    skip = 0
    while True:
        body = await http.json(path, {**params, "limit": 200, "skip": skip})
        items = body.get("items") or []
        slugs += [str(item.get("slug")) for item in items if isinstance(item, dict)]
        skip += len(items)
        if not items or not body.get("has_more") or skip >= int(body.get("total") or 0) or len(slugs) > MAX_BOOKS:
            return slugs


def _digest(item: dict[str, Any], tier: str, clean: bool) -> tuple[str | None, int]:
    entry = (item.get("tiers") or {}).get(tier) or {}
    copy = entry.get("clean" if clean else "marked") or {}
    digest = copy.get("sha256" if clean else "content_sha256") or (item.get("master") or {}).get("sha256")
    size = copy.get("bytes")
    return (digest if isinstance(digest, str) else None), (size if type(size) is int and size >= 0 else 0)


async def _listing(run: Run, book: str | None) -> list[Page]:
    """The listing's pages (of one book, or all), cursor by cursor; a cursor seen before, an answer larger than
    ``--max-json`` or more than ``MAX_LISTED`` pages ends it with ``Refused``."""
    args = run.args
    pages: list[Page] = []
    seen: set[str] = set()
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 1000, **({"book_id": book} if book else {})}
        if cursor:
            params["cursor"] = cursor
        body = await run.http.json("/dataset/images", params)
        items = body.get("items")
        if not isinstance(items, list) or len(items) > 1000:
            raise Refused("the dataset listing's answer is not a list of at most 1000 items")
        for item in items:
            slug, number = item.get("slug") if isinstance(item, dict) else None, None
            if not isinstance(slug, str) or not SLUG.fullmatch(slug):
                raise UnsafeName(f"the dataset listing names a book {slug!r}, which is not a slug; nothing was fetched")
            number = item.get("page")
            if type(number) is not int or number < 1:
                raise Refused(f"the dataset listing names page {number!r} of {slug}, which is not a page number")
            digest, size = _digest(item, args.tier, args.clean)
            pages.append(Page(slug, number, not item.get("image_unavailable"), digest, size))
        if len(pages) > MAX_LISTED:
            raise Refused(f"the dataset listing names more than {MAX_LISTED} pages; not read on")
        cursor = body.get("next_cursor")
        if not cursor:
            return pages
        if not isinstance(cursor, str) or cursor in seen:
            raise Refused("the dataset listing's next_cursor repeats one it gave before: it would never end")
        seen.add(cursor)


async def _select(run: Run, withdrawn: set[str]) -> list[Page]:
    """The pages the command line selects (books, globs, list, collection or all; then --from/--to). A book that
    cannot be listed is a failure; the others go on."""
    args = run.args
    names = list(args.books)
    if args.list:
        names += [line.strip() for line in Path(args.list).read_text().splitlines() if line.strip()]
    globs = [n for n in names if any(c in n for c in "*?[")]
    names = [n for n in names if n not in globs]
    if globs:
        every = await _catalogue(run.http, "/books", {})
        names += [s for s in every if any(fnmatch.fnmatchcase(s, g) for g in globs)]
        for pattern in globs:
            if not any(fnmatch.fnmatchcase(s, pattern) for s in every):
                run.failures.append(f"{pattern}: no book matches")
    if args.collection:
        names += await _catalogue(run.http, "/books/library", {"collection": args.collection})
    pages: list[Page] = []
    if args.all:
        pages = await _listing(run, None)
    for name in dict.fromkeys(names):
        try:
            pages += await _listing(run, name)
        except Refused as exc:
            if exc.status == 404 and name in withdrawn:
                continue  # withdrawn since the bag's point: reported as such, not as a failure
            run.failures.append(f"{name}: {exc}")
            run.say(f"failed: {name}: {exc}")
    unique = {(p.slug, p.number): p for p in pages}
    low, high = args.from_page or 1, args.to_page or sys.maxsize
    return [p for p in unique.values() if low <= p.number <= high]


def _plan(run: Run, pages: list[Page]) -> list[Job]:
    """Ranges of pages still to fetch (missing, or fetched under another listing digest), ``--pages`` at most."""
    journal = run.journal
    todo: dict[str, list[int]] = {}
    for page in sorted(pages, key=lambda p: (p.slug, p.number)):
        if not page.image:
            if (page.slug, page.number) not in journal.unavailable:
                journal.append({"book": page.slug, "page": page.number, "image_unavailable": True})
            continue
        run.selected += 1
        entry = journal.files.get(run.path(page.slug, page.number))
        if entry is not None and (entry.get("listing") is None or page.digest in (None, entry["listing"])):
            run.skipped += 1
            continue
        if entry is not None:
            run.changed += 1
        todo.setdefault(page.slug, []).append(page.number)
    jobs: list[Job] = []
    for slug, numbers in todo.items():
        run_: list[int] = []
        for n in numbers:
            if run_ and (n != run_[-1] + 1 or len(run_) == run.args.pages):
                jobs.append(Job(slug, run_[0], run_[-1]))
                run_ = []
            run_.append(n)
        if run_:
            jobs.append(Job(slug, run_[0], run_[-1]))
    return jobs


# ---------------------------------------------------------------------------------------------------- fetching


def _inner_name(name: str) -> str:
    """The member's path below the archive's top folder; ``UnsafeName`` unless plain relative parts (no ``..``, no
    absolute or empty part, no backslash)."""
    parts = name.split("/")
    if "\\" in name or len(parts) < 2 or any(p in ("", ".", "..") for p in parts) or PurePosixPath(name).is_absolute():
        raise UnsafeName(f"the archive holds {name!r}, which is not a plain file name inside the bag; stopped there")
    return "/".join(parts[1:])


_RESUME = re.compile(r"stops before page (\d+)(?: of \d+)?: (.*)")
_RETRY_IN = re.compile(r"available in (\d+) seconds")


def _resume(text: str) -> tuple[int, str] | None:
    """``(page, reason)`` from RESUME.txt's first line, or None when it has another shape."""
    match = _RESUME.search(text.split("\n", 1)[0])
    return (int(match[1]), match[2].strip()[:500]) if match else None


async def _read_small(reader: TarReader, member: Any) -> bytes:
    if member.size > MAX_TAG:
        raise TarRefused(f"the archive's {member.name!r} declares {member.size} bytes (a tag file: at most {MAX_TAG})")
    return b"".join([chunk async for chunk in reader.body(member)])


async def _unpack(run: Run, job: Job, first: int, response: aiohttp.ClientResponse) -> tuple[int, str] | None:
    """Write and record each page member as it arrives; ``(page, reason)`` when the archive stopped short
    (``RESUME.txt``), None when it was read whole or the run is stopping (after the member in hand)."""
    slug = job.slug
    reader = TarReader(response.content.readexactly, run.args.max_member)
    folder = run.journal.dest / "data" / slug
    stopped: tuple[int, str] | None = None
    async for member in reader:
        name = _inner_name(member.name)
        if name.startswith("data/"):
            page = _page_of(run, slug, name, first, job.last)
            target = folder / f"{slug}-p{page}{run.suffix}"
            folder.mkdir(parents=True, exist_ok=True)
            if not target.resolve().is_relative_to(folder.resolve()):
                raise UnsafeName(f"the archive's {member.name!r} would be written outside {folder}; stopped there")
            partial = target.with_name(target.name + ".part")
            digest = hashlib.sha256()
            try:
                with open(partial, "wb") as out:
                    async for chunk in reader.body(member):
                        digest.update(chunk)
                        out.write(chunk)
                run.billed += 1  # received whole: the server commits its unit
                if member.pax.get(SHA256_PAX) != digest.hexdigest():
                    raise Transient(f"{member.name}: the bytes received do not match their SHA-256")
                os.replace(partial, target)
            finally:
                partial.unlink(missing_ok=True)
            listed = run.listed.get((slug, page))
            run.journal.append(
                {
                    "path": f"data/{slug}/{target.name}",
                    "sha256": digest.hexdigest(),
                    "bytes": member.size,
                    "book": slug,
                    "page": page,
                    "listing": listed,
                }
            )
            run.fetched += 1
            run.fetched_books.add(slug)
            run.bytes += member.size
            if run.stopping.is_set():
                return None  # the member in hand is finished and recorded
        elif name == "image-unavailable.txt":
            for line in (await _read_small(reader, member)).decode("utf-8", "replace").splitlines():
                number = line.split("\t", 1)[0]
                if number.isdigit() and first <= int(number) <= job.last:
                    run.journal.append({"book": slug, "page": int(number), "image_unavailable": True})
        elif name == "RESUME.txt":
            text = (await _read_small(reader, member)).decode("utf-8", "replace")
            stopped = _resume(text) or (
                -1,
                f"the archive stopped short with a RESUME.txt of an unknown shape: {text[:200]!r}",
            )
        else:
            await _read_small(reader, member)  # the archive's own tag files: the bag's are written from the journal
    return stopped


def _page_of(run: Run, slug: str, name: str, first: int, last: int) -> int:
    match = re.fullmatch(rf"data/{re.escape(slug)}-p(\d+){re.escape(run.suffix)}", name)
    if match is None or not first <= int(match[1]) <= last:
        raise UnsafeName(f"the archive holds {name!r}, which is not a page asked for ({slug} {first}-{last}); stopped")
    return int(match[1])


def _have(run: Run, slug: str, page: int) -> bool:
    """Whether the bag holds ``page`` as the listing has it now (or the page has no image)."""
    entry = run.journal.files.get(run.path(slug, page))
    current = entry is not None and entry.get("listing") == run.listed.get((slug, page))
    return current or (slug, page) in run.journal.unavailable


def _next_missing(run: Run, job: Job, first: int) -> int:
    page = first
    while page <= job.last and _have(run, job.slug, page):
        page += 1
    return page


async def _fetch(run: Run, job: Job) -> None:
    """One range, resumed from the first page not yet on disk after each transient failure; a try that wrote a
    page does not count against ``--retries``."""
    args = run.args
    first, attempt = job.first, 0
    while first <= job.last and not run.stopping.is_set():
        params = {
            "tier": args.tier,
            "format": "tar",
            "from": first,
            "to": job.last,
            **({"clean": 1} if args.clean else {}),
        }
        before = run.fetched
        try:
            async with run.http.get(f"/books/{job.slug}/archive", params) as response:
                try:
                    stopped = await _unpack(run, job, first, response)
                finally:
                    response.close()  # not read whole (stopped, refused): the connection is not reused
            if stopped is None:
                return
            page, reason = stopped
            if reason.startswith("rate_limited"):
                retry = _RETRY_IN.search(reason)
                raise BudgetSpent(reason, float(retry[1]) if retry else 0.0)
            run.fail(job.slug, page if page > 0 else _next_missing(run, job, first), job.last, reason)
            return
        except (Transient, aiohttp.ClientError, asyncio.IncompleteReadError, TimeoutError, OSError) as exc:
            failure = exc if isinstance(exc, Transient) else Transient(f"{type(exc).__name__}: {exc}".rstrip(": "))
            first = _next_missing(run, job, first)
            if first > job.last:
                return
            attempt = 1 if run.fetched > before else attempt + 1
            if attempt > args.retries:
                run.fail(job.slug, first, job.last, f"{failure} (after {args.retries} retries)")
                return
            if not run.stopping.is_set():
                await run.http.backoff(attempt, failure, f"{job.slug} from page {first}")
        except BudgetSpent as exc:
            if run.budget is None:
                run.budget = exc
                run.say(f"the image budget is spent: {exc}; stopping")
            run.stopping.set()
            return
        except (Refused, TarRefused, UnsafeName) as exc:
            run.fail(job.slug, _next_missing(run, job, first), job.last, str(exc))
            return


# ---------------------------------------------------------------------------------------------------- the bag


def _finish(run: Run, base: str, point: int | None) -> None:
    """Write the bag's tag files from the journal (digests of the bytes on disk) and validate it with bagit."""
    import bagit

    logging.getLogger("bagit").setLevel(logging.WARNING)  # a line per file checked is not news
    dest = run.journal.dest
    entries = sorted(run.journal.files.values(), key=lambda e: e["path"])
    (dest / "bagit.txt").write_bytes(b"BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n")
    (dest / "manifest-sha256.txt").write_text("".join(f"{e['sha256']}  {e['path']}\n" for e in entries))
    size = sum(e["bytes"] for e in entries)
    info = [
        ("Source-Organization", base),
        ("Bagging-Date", time.strftime("%Y-%m-%d", time.gmtime())),
        ("Payload-Oxum", f"{size}.{len(entries)}"),
        ("Image-Unavailable", ",".join(f"{b}:{p}" for b, p in sorted(run.journal.unavailable)) or "none"),
        ("Change-Feed-Seq", str(point) if point is not None else "none"),
    ]
    (dest / "bag-info.txt").write_text("".join(f"{k}: {v}\n" for k, v in info))
    tags = ["bagit.txt", "bag-info.txt", "manifest-sha256.txt"]
    digests = {t: file_digest(dest / t) for t in tags}
    (dest / "tagmanifest-sha256.txt").write_text("".join(f"{d}  {t}\n" for t, d in digests.items()))
    bagit.Bag(str(dest)).validate()


def _remove(run: Run, slug: str) -> list[str]:
    removed = []
    for path, entry in list(run.journal.files.items()):
        if entry["book"] == slug:
            (run.journal.dest / path).unlink(missing_ok=True)
            run.journal.append({"path": path, "removed": True, "book": slug, "page": entry["page"]})
            removed.append(path)
    folder = run.journal.dest / "data" / slug
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
    return removed


def _progress(run: Run, final: bool = False) -> None:
    if run.quiet:
        return
    elapsed = time.monotonic() - run.started
    left = run.selected - run.skipped - run.fetched
    pace = run.fetched / elapsed if elapsed and run.fetched else 0.0
    eta = f"{left / pace:5.0f} s" if pace else "    ?"
    rate = run.bytes / elapsed / 1e6 if elapsed else 0.0
    line = (
        f"\r{run.skipped + run.fetched}/{run.selected} images  {run.bytes / 1e6:8.1f} MB  {rate:6.1f} MB/s  ETA {eta}"
    )
    sys.stderr.write(line + ("\n" if final else ""))
    sys.stderr.flush()


def _verify(journal: Journal, listed: dict[tuple[str, int], str | None] | None) -> tuple[list[str], dict[str, int]]:
    """Re-hash every file the bag's manifest names; with the listing, name files fetched under another digest."""
    problems: list[str] = []
    manifest = journal.dest / "manifest-sha256.txt"
    lines = manifest.read_text(encoding="utf-8").splitlines() if manifest.exists() else []
    if not lines:
        problems.append("manifest-sha256.txt is missing or empty")
    checked = 0
    for line in lines:
        digest, _, path = line.partition("  ")
        file = journal.dest / path
        checked += 1
        if not file.is_file():
            problems.append(f"{path}: missing")
        elif file_digest(file) != digest:
            problems.append(f"{path}: its bytes do not match manifest-sha256.txt")
    stale = 0
    if listed is not None:
        for entry in journal.files.values():
            now = listed.get((entry["book"], entry["page"]), "gone")
            if now == "gone":
                problems.append(f"{entry['path']}: no longer in the dataset listing")
            elif entry.get("listing") and now and now != entry["listing"]:
                stale += 1
                problems.append(f"{entry['path']}: the stored image changed since it was fetched (listing digest)")
    return problems, {"checked": checked, "stale": stale}


# ---------------------------------------------------------------------------------------------------- the command


def _bagit_missing() -> str | None:
    try:
        import bagit  # noqa: F401
    except ImportError:
        return "imagesvc download needs the bagit library, which is not installed: pip install 'bagit==1.9.0'"
    return None


async def _main(args: argparse.Namespace, run_box: list[Run]) -> int:
    key = args.key or os.environ.get("IMAGESVC_KEY") or ""
    local_verify = args.verify and not (args.books or args.list or args.all or args.collection)
    if not key and not local_verify:
        print("imagesvc download: a key is needed (--key or IMAGESVC_KEY)", file=sys.stderr)
        return EXIT["usage"]
    missing = _bagit_missing()
    if missing:
        print(f"imagesvc download: {missing}. Nothing was fetched.", file=sys.stderr)
        return EXIT["usage"]
    if args.url:
        base = args.url
    else:
        from imagesvc.client import default_url

        base = default_url(os.environ)
    base = base.rstrip("/").removesuffix("/mcp")
    if not (args.books or args.list or args.all or args.collection) and not args.verify:
        print(
            "imagesvc download: name books (ids, slugs or globs), --list FILE, --collection SLUG or --all",
            file=sys.stderr,
        )
        return EXIT["usage"]
    dest = Path(args.dest)
    if args.verify and not (dest / "manifest-sha256.txt").exists():
        print(f"imagesvc download: {dest} is not a bag this command made (no manifest-sha256.txt)", file=sys.stderr)
        return EXIT["usage"]
    journal = Journal.load(dest, check=not args.verify)
    quiet = args.quiet or args.json
    log = open(args.log, "a", encoding="utf-8") if args.log else None  # noqa: SIM115 (closed below)
    said: list[str] = []
    pacer = Pacer(args.max_wait, say=lambda text: said.append(text) or (run_box[0].say(text) if run_box else None))
    connections = max(1, min(args.concurrency, ARCHIVE_SLOTS))
    http = Http(
        base, key, pacer=pacer, retries=args.retries, timeout=args.timeout, max_wait=args.max_wait,
        max_json=args.max_json, connections=connections + 1, say=lambda text: run_box[0].say(text),
    )  # fmt: skip
    suffix = f"-{args.tier}{'-clean' if args.clean else ''}.jpg"
    run = Run(args, journal, http, log, quiet, suffix)
    run.stopping = http.stopping
    run_box.append(run)
    for leftover in journal.leftovers:
        run.say(f"removed a partial file left by an earlier run: {leftover}")
    for dropped in journal.dropped:
        run.say(f"fetching again: {dropped} is missing or its bytes changed on disk")
    point: int | None = None
    withdrawn: list[str] = []
    removed: list[str] = []
    jobs: list[Job] = []
    pages: list[Page] = []
    valid = False
    async with http:
        try:
            if args.verify:
                listed = None
                if args.books or args.all or args.list or args.collection:
                    pages = await _select(run, set())
                    listed = {(p.slug, p.number): p.digest for p in pages if p.image}
                problems, counts = _verify(journal, listed)
                summary = {"dest": str(dest), "outcome": "verified" if not problems else "failures", **counts,
                           "requests": http.requests, "problems": problems}  # fmt: skip
                _report(run, summary, problems, "verified" if not problems else "failures")
                return EXIT["complete" if not problems else "failures"]
            activities: list[feed.Activity] = []
            try:
                point, activities = await feed.since(http, journal.point if journal.existed else None)
            except Refused as exc:  # the listing's digests still say what changed; the point stays where it was
                run.say(f"the change feed could not be read ({exc}): withdrawn books are not reported this run")
            latest: dict[str, str] = {}
            for activity in activities:
                if activity.slug:
                    latest[activity.slug] = activity.kind
            withdrawn = sorted(s for s, kind in latest.items() if kind == "Delete" and s in journal.books())
            pages = await _select(run, set(withdrawn))
            run.listed = {(p.slug, p.number): p.digest for p in pages}
            jobs = _plan(run, pages)
        except BudgetSpent as exc:
            run.budget = exc
        except (Refused, UnsafeName, Transient) as exc:
            run.failures.append(str(exc))
            run.say(f"failed: {exc}")
        if args.dry_run:
            return _dry_run(run, jobs, pages, pacer)
        for slug in withdrawn:
            run.say(
                f"withdrawn from the library: {slug}" + (" (removed from the bag)" if args.remove_withdrawn else "")
            )
            if args.remove_withdrawn:
                removed += _remove(run, slug)
        ticker = asyncio.create_task(_tick(run))
        queue: asyncio.Queue[Job] = asyncio.Queue()
        for job in jobs:
            queue.put_nowait(job)

        async def worker() -> None:
            while not run.stopping.is_set() and run.budget is None:
                try:
                    job = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                await _fetch(run, job)

        if run.budget is None:
            await asyncio.gather(*(worker() for _ in range(connections)))
        ticker.cancel()
        _progress(run, final=True)
    outcome = (
        "budget_spent" if run.budget is not None else "interrupted" if run.interrupted else
        "failures" if run.failures else "complete"
    )  # fmt: skip
    try:
        _finish(run, base, point if outcome == "complete" else journal.point)
        valid = True
    except Exception as exc:  # bagit's own errors (each file named): the bag is reported as not valid
        run.failures.append(f"bag not valid: {exc}")
        outcome = "failures" if outcome == "complete" else outcome
    if outcome == "complete" and point is not None:
        journal.save_point(point)
    left = run.selected - run.skipped - run.fetched
    summary: dict[str, Any] = {
        "dest": str(dest),
        "outcome": outcome,
        "exit_status": EXIT[outcome],
        "books": len({p for p, _ in run.listed}),
        "books_fetched": len(run.fetched_books),
        "images": len(journal.files),
        "expected": run.selected,
        "fetched": run.fetched,
        "changed": run.changed,
        "skipped": run.skipped,
        "left": left,
        "failed": run.failures,
        "image_unavailable": len(journal.unavailable),
        "units_billed": run.billed,
        "bytes": run.bytes,
        "requests": http.requests,
        "retries": http.retried,
        "requests_refused": pacer.refusals,
        "withdrawn": withdrawn,
        "removed": removed,
        "leftovers_removed": journal.leftovers,
        "change_point": journal.point,
        "seconds": round(time.monotonic() - run.started, 2),
        "valid": valid,
        "failures": run.failures,
    }
    if run.budget is not None:
        resume = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=run.budget.retry_after)
        summary |= {
            "resume_after_seconds": round(run.budget.retry_after),
            "resume_at": resume.isoformat(timespec="seconds"),
        }
    _report(run, summary, run.failures, outcome)
    if log is not None:
        log.close()
    return EXIT[outcome]


def _report(run: Run, summary: dict[str, Any], failures: list[str], outcome: str) -> None:
    if run.log is not None:
        run.log.write(json.dumps(summary) + "\n")
        run.log.flush()
    if run.args.json:
        print(json.dumps(summary, indent=2))
    elif "fetched" in summary:
        s = summary
        bag = "valid bag" if s["valid"] else "NOT a valid bag"
        print(
            f"{s['images']}/{s['expected']} images in {s['dest']} ({bag}): "
            f"{s['fetched']} fetched ({s['changed']} changed), {s['skipped']} already there, {s['left']} left, "
            f"{len(failures)} failed; {s['units_billed']} image units billed; {s['requests']} requests"
        )
        if s["withdrawn"]:
            print(f"withdrawn from the library: {', '.join(s['withdrawn'])}")
        if "resume_at" in s:
            print(f"the image budget is spent: run again after {s['resume_at']} ({s['resume_after_seconds']} s)")
        if outcome == "interrupted":
            print("interrupted: run the same command again to go on")
    else:
        print(f"{summary['checked']} files checked in {summary['dest']}: {len(failures)} problems")
    for failure in failures:
        print(f"imagesvc download: failed: {failure}", file=sys.stderr)


def _dry_run(run: Run, jobs: list[Job], pages: list[Page], pacer: Pacer) -> int:
    """What the run would fetch and cost, at the key's request limit; nothing is fetched."""
    todo = {(j.slug, n) for j in jobs for n in range(j.first, j.last + 1)}
    size = sum(p.bytes for p in pages if (p.slug, p.number) in todo)
    requests = len(jobs)
    rate = (pacer.quota / pacer.window) if pacer.quota else None
    seconds = round(requests / rate, 1) if rate else None
    summary = {
        "dest": str(run.journal.dest),
        "outcome": "dry_run",
        "books": len({s for s, _ in todo}),
        "pages": len(todo),
        "skipped": run.skipped,
        "bytes": size,
        "units": len(todo),
        "requests": requests,
        "request_limit": {"requests": pacer.quota, "per_seconds": pacer.window} if pacer.quota else None,
        "seconds_at_request_limit": seconds,
        "failures": run.failures,
    }
    if run.args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(
            f"would fetch {len(todo)} pages of {summary['books']} books (about {size / 1e6:.1f} MB, stored sizes), "
            f"{len(todo)} image units, in {requests} archive requests"
            + (
                f": at least {seconds} s at the key's limit of {pacer.quota} per {pacer.window:.0f} s"
                if seconds
                else ""
            )
            + f"; {run.skipped} pages already in the bag"
        )
    for failure in run.failures:
        print(f"imagesvc download: failed: {failure}", file=sys.stderr)
    return EXIT["complete" if not run.failures else "failures"]


async def _tick(run: Run) -> None:
    while True:
        await asyncio.sleep(0.5)
        _progress(run)


def run(args: argparse.Namespace) -> int:
    """The ``download`` command; returns the exit status (``EXIT``)."""
    box: list[Run] = []

    async def guarded() -> int:
        loop = asyncio.get_running_loop()
        main = asyncio.current_task()
        presses = [0]

        def interrupt() -> None:
            presses[0] += 1
            if presses[0] == 1 and box:
                box[0].interrupted = True
                box[0].stopping.set()
                box[0].say("Ctrl-C: finishing the files in hand, then stopping (Ctrl-C again aborts)")
            elif main is not None:
                main.cancel()

        loop.add_signal_handler(signal.SIGINT, interrupt)
        try:
            return await _main(args, box)
        except asyncio.CancelledError:
            print("\nimagesvc download: aborted; every file written so far is recorded", file=sys.stderr)
            return EXIT["aborted"]
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    return asyncio.run(guarded())


def add_parser(sub: Any) -> None:
    """The ``download`` subcommand of ``imagesvc``."""
    codes = "; ".join(f"{code} {name.replace('_', ' ')}" for name, code in EXIT.items())
    p = sub.add_parser(
        "download",
        help="download books' page images into a BagIt bag (resumable, kept in sync)",
        description="Download page images as a BagIt bag through the archive route: resumable after a kill or "
        "Ctrl-C, kept in sync with the change feed and the listing's digests, paced within the key's limits, "
        "retried on network failures, validated with bagit at the end.",
        epilog=f"exit status: {codes}.",
    )
    p.add_argument("books", nargs="*", help="book ids, slugs or globs of slugs (quoted: 'demo-*')")
    p.add_argument("--list", help="a file of book ids, slugs or globs, one a line")
    p.add_argument("--collection", help="every book of this collection (its slug)")
    p.add_argument("--all", action="store_true", help="every book the dataset listing shows the key")
    p.add_argument("--dest", required=True, help="the bag folder (created; an existing one is resumed and synced)")
    p.add_argument("--from", dest="from_page", type=int, help="first page of each book (inclusive)")
    p.add_argument("--to", dest="to_page", type=int, help="last page of each book (inclusive)")
    p.add_argument("--tier", default="full", choices=["full", "display", "thumb"])
    p.add_argument("--clean", action="store_true", help="clean copies (full-tier keys)")
    p.add_argument("--dry-run", action="store_true", help="say what would be fetched and what it costs; fetch nothing")
    p.add_argument("--verify", action="store_true", help="re-hash the bag against its manifest (and, with books "
                   "named, the listing's digests); fetch no image")  # fmt: skip
    p.add_argument("--remove-withdrawn", action="store_true", help="delete the files of books withdrawn since")
    p.add_argument("--pages", type=int, default=100, help="pages per archive request (default 100)")
    p.add_argument("--concurrency", type=int, default=4, help=f"archives at once (default 4, at most {ARCHIVE_SLOTS})")
    p.add_argument("--retries", type=int, default=5, help="tries after a network failure or 5xx (default 5)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to connect or between bytes (default 60)")
    p.add_argument("--max-wait", type=float, default=60.0, help="cap on a Retry-After or backoff wait, s (default 60)")
    p.add_argument("--max-member", type=int, default=1 << 30, help="largest image accepted, bytes (default 1 GiB)")
    p.add_argument("--max-json", type=int, default=64 << 20, help="largest JSON answer read, bytes (default 64 MiB)")
    p.add_argument("--log", help="append what is said, every failure and the summary to this file")
    p.add_argument("--url", default=os.environ.get("IMAGESVC_URL"), help="server (REST base or MCP URL)")
    p.add_argument("--key", default=None, help="API key (or IMAGESVC_KEY)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress line")
