"""A book in one request: the plan of a page-image archive, the ``get_book_archive`` tool that prices it, and the
members that fill it.

Every image member is what ``/image`` would deliver for the same page, tier, ``clean`` and key (``locate_image`` and
``delivery_bytes``: the XMP note, then a C2PA manifest naming the key) and is metered as ``/image`` meters it: one
image unit reserved before the member is made, committed once the client acknowledged its last byte, refunded
otherwise. A pool that runs dry (or a store that fails) mid-way ends the archive cleanly: the images sent so far,
``RESUME.txt`` saying where to go on, and the BagIt tag files, whose digests are of the bytes actually sent.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from imagesvc.access.ledger import Ledger
from imagesvc.access.meter import Meter
from imagesvc.bulk.bag import BAGIT_TXT, bag_info, manifest, sha256_hex
from imagesvc.bulk.containers import FORMATS, Member
from imagesvc.catalog.dataset import archive_pages, book_versions
from imagesvc.errors import ImagesvcError, InvalidRequest, Unauthorized
from imagesvc.imaging import TIERS
from imagesvc.services import Services
from imagesvc.storage import StoredObject
from imagesvc.storage.hot import read_through
from imagesvc.tools import Call, tool
from imagesvc.tools.books import require_book
from imagesvc.tools.image_delivery import ImageDelivery, delivery_bytes, locate_image, require_clean

__all__ = [
    "ARCHIVE_SCHEMA",
    "ArchivePlan",
    "Outlet",
    "archive_members",
    "get_book_archive",
    "plan_archive",
    "require_key",
]

MAX_PAGE = 1_000_000
ARCHIVE_SCHEMA: dict[str, Any] = {
    "required": ["book_id"],
    "properties": {
        "book_id": {"type": "string", "minLength": 1, "description": "Book id or slug."},
        "tier": {"enum": list(TIERS), "default": "full", "description": "Image tier of every page."},
        "clean": {"type": "boolean", "default": False, "description": "Unmarked copies; full-tier keys only."},
        "format": {"enum": list(FORMATS), "default": "zip", "description": "Container: zip (ZIP64) or tar (pax)."},
        "from": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "description": "First page (resume here)."},
        "to": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "description": "Last page, inclusive."},
    },
}
HASH_IN_THREAD_BYTES = 2 * 1024 * 1024  # larger members are hashed off the event loop
READ_AHEAD = 4  # stored objects read ahead of the member being sent


@dataclass
class ArchivePlan:
    """What one archive request covers: the book, the page range, the tier, and the pages in it."""

    book: dict[str, Any]
    tier: str
    clean: bool
    format: str
    first: int
    last: int
    pages: list[dict[str, Any]]  # number, image_unavailable, unavailable_reason, stored
    catalog_version: str
    url: str
    root: str = field(init=False)

    def __post_init__(self) -> None:
        self.root = f"{self.book['slug']}-{self.tier}{'-clean' if self.clean else ''}"

    @property
    def images(self) -> int:
        """The priced members: pages in range with a stored image of the tier."""
        return sum(1 for p in self.pages if _has_image(p))

    @property
    def filename(self) -> str:
        return f"{self.root}-p{self.first}-{self.last}.{self.format}"


def _has_image(page: dict[str, Any]) -> bool:
    return not page["image_unavailable"] and bool(page["stored"])


def require_key(call: Call, what: str) -> None:
    """Raise ``Unauthorized`` (401) unless the caller sent an API key: bulk features are for keys (spec §5).
    ``what`` names the feature, as the subject of "... need an API key"."""
    if call.caller.key_ref is None:
        raise Unauthorized(
            f"{what} need an API key; this request carried none.",
            recovery=[
                "Request a free API key on the developer page and send it as 'Authorization: Bearer <key>'.",
                "Paid tiers are uncapped; full-tier keys may also ask for clean copies (clean=1).",
            ],
            details={"caller_class": call.caller.allowance.name},
        )


async def plan_archive(
    services: Services,
    call: Call,
    *,
    book_id: str,
    tier: str = "full",
    clean: bool = False,
    format: str = "zip",
    first: int | None = None,
    last: int | None = None,
) -> ArchivePlan:
    """Check an archive request and list its pages. Errors: ``Unauthorized`` (401, no key), ``Forbidden`` (403,
    ``clean`` without a full-tier key), ``NotFound`` (404, unknown book), ``InvalidRequest`` (400: a range that
    starts past the book's last page or ends before it starts). A ``to`` past the end is cut to the last page."""
    require_key(call, "Page-image archives")
    if clean:
        require_clean(call)
    book = await require_book(services, book_id, counts=False)
    numbers = await services.db.page_numbers(book["id"])
    if not numbers:
        raise InvalidRequest(f"Book {book['slug']!r} has no pages.", details={"book_id": book["id"]})
    low, high = numbers[0], numbers[-1]
    start = low if first is None else first
    end = high if last is None else min(last, high)
    if start > high or start > end:
        asked = f"from={start} is past the last page" if start > high else f"from={start} comes after to={last}"
        raise InvalidRequest(
            f"{asked} of the range; {book['slug']!r} has pages {low}-{high}.",
            recovery=[f"Ask for from={low} to to={high}, or leave them out for the whole book."],
            details={"book_id": book["id"], "first_page": low, "last_page": high},
        )
    pages = await services.db.call(archive_pages, book["id"], start, end, tier)
    change = (await services.db.call(book_versions, [book["id"]])).get(book["id"])
    version = f"{book['source_hash'][:16]}" + (f".{change['seq']}" if change else "")
    query = {"tier": tier, "format": format, "from": start, "to": end, **({"clean": "1"} if clean else {})}
    settings = services.settings
    url = f"{settings.site_url}{settings.base_path}/books/{book['slug']}/archive?{urlencode(query)}"
    return ArchivePlan(book, tier, clean, format, start, end, pages, version, url)


@tool("get_book_archive", ARCHIVE_SCHEMA)
async def get_book_archive(
    services: Services,
    call: Call,
    book_id: str,
    tier: str = "full",
    clean: bool = False,
    format: str = "zip",
    **page_range: int,
) -> dict[str, Any]:
    """The URL of a book's page images as one archive (ZIP or TAR that unpacks into a BagIt bag) and what it costs:
    one request against the limit, one image unit per page image. Keys only; clean copies for full-tier keys. The
    archive itself is an HTTP download (GET the url with the same Authorization header); this call delivers no
    image and costs none.

    Pages with no held image are listed (``image_unavailable``) and not charged. An archive cut short by an empty
    pool ends with RESUME.txt naming the page to resume from (``from``).
    """
    plan = await plan_archive(
        services,
        call,
        book_id=book_id,
        tier=tier,
        clean=clean,
        format=format,
        first=page_range.get("from"),
        last=page_range.get("to"),
    )
    state = await call.meter.state("images")
    return {
        "url": plan.url,
        "method": "GET",
        "headers": {"Authorization": "Bearer <your key>"},
        "content_type": FORMATS[plan.format],
        "filename": plan.filename,
        "book_id": plan.book["id"],
        "slug": plan.book["slug"],
        "tier": plan.tier,
        "clean": plan.clean,
        "format": plan.format,
        "from": plan.first,
        "to": plan.last,
        "pages": len(plan.pages),
        "image_unavailable": [p["number"] for p in plan.pages if not _has_image(p)],
        "catalog_version": plan.catalog_version,
        "cost": {
            "requests": 1,
            "pool": "images",
            "units": plan.images,
            "remaining": state.remaining,  # None: uncapped (still metered)
            "affordable": plan.images if state.remaining is None else min(plan.images, state.remaining),
        },
    }


async def reserve_image(call: Call) -> Meter:
    """One image unit held on a meter of its own (settled when that member is sent). Raises ``RateLimited`` (429)
    when the pool is empty and ``AccessUnavailable`` (503) when the access store is down."""
    meter = Meter(call.meter.access, call.caller, delivers=call.meter.delivers)
    await meter.reserve("images", 1)
    return meter


async def _digest(data: bytes) -> str:
    if len(data) > HASH_IN_THREAD_BYTES:
        return await asyncio.to_thread(sha256_hex, data)
    return sha256_hex(data)


@dataclass
class Outlet:
    """The connection an archive goes out on, as its members need it: the ledger that settles each image's
    reservation once the client acknowledged the member's last byte, the stream position of what was handed over so
    far, a nudge to look at acknowledgements now, and a check (made every ``recheck_seconds``) that the caller may
    still be served: it returns the error that ends the archive (a revoked key), or None."""

    ledger: Ledger
    position: Callable[[], int]
    handed: Callable[[], None]
    still_allowed: Callable[[], Awaitable[ImagesvcError | None]]
    recheck_seconds: float


class _KeyCheck:
    """``Outlet.still_allowed`` at most once every ``recheck_seconds`` (the answer in between is the last one)."""

    def __init__(self, outlet: Outlet) -> None:
        self.outlet = outlet
        self.checked = asyncio.get_running_loop().time()

    async def refusal(self) -> ImagesvcError | None:
        now = asyncio.get_running_loop().time()
        if now - self.checked < self.outlet.recheck_seconds:
            return None
        self.checked = now
        return await self.outlet.still_allowed()


async def archive_members(
    services: Services,
    call: Call,
    plan: ArchivePlan,
    first_paid: Meter | None,
    *,
    request_id: str,
    outlet: Outlet,
) -> AsyncIterator[Member]:
    """The members of ``plan``'s archive, in order: ``bagit.txt``, each page image, then ``RESUME.txt`` (when cut
    short), ``image-unavailable.txt`` (when any page has no image), ``bag-info.txt``, ``manifest-sha256.txt`` and
    ``tagmanifest-sha256.txt``.

    ``first_paid`` is the first image's reservation, made before the response started (so that a caller who cannot
    pay gets a 429 before any byte), and held by ``outlet.ledger``. Each image's reservation is handed to the ledger
    at the stream position of its member's last byte, and committed once the client acknowledged it; the ledger
    refunds the rest when the delivery ends. A pool that runs dry, a store that fails, a commit the access store
    refuses or a key revoked meanwhile ends the archive cleanly, with RESUME.txt.
    """
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    sent: list[tuple[str, str]] = []
    size = 0
    ledger = outlet.ledger
    key_check = _KeyCheck(outlet)
    stopped: tuple[int, str] | None = None
    delivered_pages: list[int] = []

    def member(path: str, data: bytes, digest: str, meter: Meter | None = None) -> Member:
        async def settle() -> None:
            assert meter is not None
            ledger.hand(meter, outlet.position())
            outlet.handed()

        return Member(f"{plan.root}/{path}", data, digest, now, settle if meter is not None else None)

    reads = _Reads(services, call, plan, lambda: ledger.acknowledged)
    try:
        yield member("bagit.txt", BAGIT_TXT, sha256_hex(BAGIT_TXT))
        for page in plan.pages:
            if not _has_image(page):
                continue
            number = page["number"]
            meter: Meter | None = None
            try:
                if ledger.failure is not None:
                    raise ledger.failure
                refusal = await key_check.refusal()
                if refusal is not None:
                    raise refusal
                if first_paid is not None:
                    meter, first_paid = first_paid, None
                else:
                    meter = await reserve_image(call)
                    ledger.hold(meter)
                delivery, stored = await reads.take(number)
                data = await delivery_bytes(services, delivery, stored)
                del stored  # the signed copy is what goes out; the stored one is not held while it is sent
            except ImagesvcError as exc:
                if meter is not None:
                    await ledger.release(meter)
                stopped = (number, f"{exc.code}: {exc.message}")
                break
            digest = await _digest(data)
            path = f"data/{delivery.filename}"
            size += len(data)
            image, data = member(path, data, digest, meter), b""  # the member alone holds the bytes while it goes out
            yield image
            sent.append((path, digest))
            delivered_pages.append(number)
        if first_paid is not None:  # the first image never went out (stopped before it): nothing to pay
            await ledger.release(first_paid)
        tags: list[tuple[str, bytes]] = []
        if stopped is not None:
            number, reason = stopped
            resume = plan.url.replace(f"from={plan.first}", f"from={number}")
            tags.append(
                (
                    "RESUME.txt",
                    (
                        f"This archive stops before page {number} of {plan.last}: {reason}\n"
                        f"Resume from page {number}: GET {resume}\n"
                    ).encode(),
                )
            )
        missing = [p for p in plan.pages if not _has_image(p)]
        if missing:
            lines = "".join(
                f"{p['number']}\timage_unavailable\t{p['unavailable_reason'] or 'not_stored'}\n" for p in missing
            )
            tags.append(("image-unavailable.txt", lines.encode()))
        fields = [
            ("Source-Organization", services.settings.site_name),
            ("External-Identifier", plan.book["id"]),
            ("External-Description", f"{plan.book['title']}: page images, {plan.tier} tier"),
            ("Bagging-Date", now.date().isoformat()),
            ("Payload-Oxum", f"{size}.{len(sent)}"),
            ("Key-Reference", call.caller.key_ref or ""),
            ("Catalog-Version", plan.catalog_version),
            ("Request-Id", request_id),
            ("Book-Slug", plan.book["slug"]),
            ("Tier", plan.tier),
            ("Clean", "true" if plan.clean else "false"),
            ("Pages-Requested", f"{plan.first}-{plan.last}"),
            ("Pages-Delivered", ",".join(map(str, delivered_pages)) or "none"),
            ("Image-Unavailable", ",".join(str(p["number"]) for p in missing) or "none"),
            ("Complete", "false" if stopped else "true"),
        ]
        if stopped is not None:
            fields.append(("Resume-From", str(stopped[0])))
        tags.append(("bag-info.txt", bag_info(fields)))
        tags.append(("manifest-sha256.txt", manifest(sent)))
        tag_entries = [("bagit.txt", sha256_hex(BAGIT_TXT))]
        for path, data in tags:
            digest = hashlib.sha256(data).hexdigest()
            tag_entries.append((path, digest))
            yield member(path, data, digest)
        tagmanifest = manifest(tag_entries)
        yield member("tagmanifest-sha256.txt", tagmanifest, sha256_hex(tagmanifest))
    finally:
        reads.cancel()  # reservations of members that never went out are the ledger's to refund


class _Reads:
    """Stored objects of the next image pages, read while the current member goes out (S3 answers in tens of
    milliseconds; one read at a time would leave the connection idle). Reading delivers nothing, so nothing is
    reserved for a page until its member is made. It reads as far ahead as the client has shown it reads: as many
    pages as the members it acknowledged, at most ``READ_AHEAD``, so an archive nobody reads holds none ahead.
    Reads bypass the hot cache (``storage.hot``), which is for popular single pages, not whole books."""

    def __init__(self, services: Services, call: Call, plan: ArchivePlan, received: Callable[[], int]) -> None:
        self.services, self.call, self.plan, self.received = services, call, plan, received
        self.queue = [p["number"] for p in plan.pages if _has_image(p)]
        self.tasks: dict[int, asyncio.Task[tuple[ImageDelivery, StoredObject]]] = {}

    async def _read(self, number: int) -> tuple[ImageDelivery, StoredObject]:
        plan = self.plan
        delivery = await locate_image(
            self.services, self.call, book=plan.book["id"], page=number, tier=plan.tier, clean=plan.clean
        )
        return delivery, await read_through(self.services.store, delivery.key)

    async def take(self, number: int) -> tuple[ImageDelivery, StoredObject]:
        """Page ``number``'s delivery and stored object; starts the reads of the pages after it."""
        depth = min(READ_AHEAD, self.received())
        while self.queue and len(self.tasks) < depth + 1:
            upcoming = self.queue.pop(0)
            self.tasks[upcoming] = asyncio.ensure_future(self._read(upcoming))
        task = self.tasks.pop(number, None) or asyncio.ensure_future(self._read(number))
        return await task

    def cancel(self) -> None:
        for task in self.tasks.values():
            task.cancel()
            task.add_done_callback(_retrieve)
        self.tasks.clear()


def _retrieve(task: asyncio.Task[object]) -> None:
    if not task.cancelled():
        task.exception()
