"""What ``/image`` delivers: which stored object, under which validator and caching rule, with which provenance note.

Marked public tiers by default; clean copies only for callers whose class allows ``clean=1``, never a marked image in
their place. Images delivered to a key carry an XMP provenance note (the colophon package's ``Note``) naming the
edition, the page's citation URL and the key's public reference; it is spliced into the file, pixels untouched, and
then (``delivery_bytes``) the file is signed with a per-request C2PA manifest: mark, then XMP, then signature.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import threading
from collections.abc import Hashable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, NamedTuple

from colophon import Note
from imagesvc.access.policy import CLASSES
from imagesvc.errors import Forbidden, InvalidRequest, NotFound
from imagesvc.imaging import TIERS
from imagesvc.imaging.xmp import build_xmp, etag_with_xmp, splice_xmp
from imagesvc.provenance import Delivery, SigningPaths
from imagesvc.provenance.credentials import signing_paths
from imagesvc.provenance.ingest import edition_text
from imagesvc.services import Services
from imagesvc.storage import StoredObject
from imagesvc.tools import Call
from imagesvc.tools.books import require_book, unknown_book

__all__ = ["ImageDelivery", "delivery_bytes", "locate_image", "require_clean"]


@dataclass(frozen=True)
class ImageDelivery:
    """One image ready to send: its object key, strong ETag, Cache-Control, and XMP note (or None)."""

    key: str
    etag: str
    cache_control: str
    xmp: str | None
    filename: str
    clean: bool
    credentials: Delivery | None = None  # what the per-request C2PA manifest says; None: sent as stored


class Target(NamedTuple):
    """The image a request names: its book's citation fields, page number, file-name stem and the tier's rendition."""

    book: dict[str, Any]
    number: int
    name: str
    rendition: dict[str, Any] | None


def _clean_classes() -> list[str]:
    return [c.name.removeprefix("key:") for c in CLASSES.values() if c.clean_allowed]


async def _page_target(services: Services, book_id: str, number: int, tier: str) -> Target:
    row = await services.db.page_image(book_id, number, tier)  # the hot path of /image: one indexed look-up
    if row is None:
        raise unknown_book(book_id)
    if row["page_id"] is None:
        raise NotFound(
            f"Book {row['slug']!r} has no page {number}.",
            recovery=[f"Pages are listed by GET /books/{row['slug']}."],
            details={"book_id": row["id"], "page": number},
        )
    if row["image_unavailable"]:
        raise NotFound(
            f"This library holds no image of page {number} of {row['slug']!r}.",
            recovery=["The page's text may still be available through the quote endpoints."],
            details={"image_unavailable": True, "reason": row["unavailable_reason"]},
        )
    # The joined row holds both the book's citation fields and the rendition's keys; public_key is NULL when the
    # page has no rendition of this tier (the column is NOT NULL in the table).
    rendition = row if row["public_key"] is not None else None
    return Target(row, number, f"{row['slug']}-p{number}", rendition)


async def _illustration_target(services: Services, illustration_id: str, tier: str) -> Target:
    ill = await services.db.illustration(illustration_id)
    if ill is None:
        raise NotFound(
            f"No illustration has the id {illustration_id!r}.",
            recovery=["Find illustration ids with GET /gallery or the search_images tool."],
            details={"illustration": illustration_id},
        )
    book = await require_book(services, ill["book_id"], counts=False)
    rendition = (await services.db.renditions([ill["id"]]))[ill["id"]].get(tier)
    return Target(book, ill["page_number"], f"{book['slug']}-p{ill['page_number']}-{ill['idx']}", rendition)


def require_clean(call: Call) -> None:
    """Raise ``Forbidden`` (403) unless the caller's class may have images without visible marks (``clean=1``)."""
    allowance = call.caller.allowance
    if not allowance.clean_allowed:
        tiers = _clean_classes()
        raise Forbidden(
            f"Images without visible marks (clean=1) need an API key of the {' or '.join(tiers)} tier; "
            f"this request is served as {allowance.label}.",
            recovery=[
                f"Send a key of the {' or '.join(tiers)} tier as 'Authorization: Bearer <key>'.",
                "Or leave out clean=1 to get the marked image.",
            ],
            details={"required_tiers": tiers, "caller_class": allowance.name},
        )


async def locate_image(
    services: Services,
    call: Call,
    *,
    book: str | None = None,
    page: int | None = None,
    illustration: str | None = None,
    tier: str = "display",
    clean: bool = False,
) -> ImageDelivery:
    """Resolve an ``/image`` request. Errors: ``InvalidRequest`` (400), ``Forbidden`` (403 for ``clean`` without a
    full-tier key), ``NotFound`` (404: unknown book, page or illustration, or a page with no held image)."""
    if tier not in TIERS:
        raise InvalidRequest(f"tier must be one of {', '.join(TIERS)}; got {tier!r}.")
    if illustration is not None and (book is not None or page is not None):
        raise InvalidRequest("Give either illustration=<id>, or book_id=<id>&page=<n>, not both.")
    if illustration is None and (book is None or page is None):
        raise InvalidRequest(
            "Say which image: book_id=<id or slug>&page=<n>, or illustration=<id>.",
            recovery=["Example: /image?book_id=<slug>&page=1&tier=display"],
        )
    if clean:
        require_clean(call)
    if illustration is not None:
        target = await _illustration_target(services, illustration, tier)
    else:
        target = await _page_target(services, book, page, tier)  # type: ignore[arg-type]
    book_row, number, name, rendition = target
    if rendition is None:
        raise NotFound(f"No {tier} image is stored for {name}.", recovery=["Ask an operator to re-run ingest."])
    key = rendition["clean_key"] if clean else rendition["public_key"]
    etag = rendition["sha256"][:32] + ("c" if clean else "m")
    xmp, credentials = None, None
    if call.caller.key_ref is not None:
        note = Note(
            title=book_row["title"],
            year=book_row["year"],
            doi=book_row["doi"],
            url=services.page_url(book_row["slug"], number),
            key_ref=call.caller.key_ref,
            date=dt.datetime.now(dt.UTC).date(),
        )
        xmp = build_xmp(
            {
                "rights": f"Digitized by {book_row['institution']}; served by {services.settings.site_name}.",
                "source": services.page_url(book_row["slug"], number),
                "web_statement": services.page_url(book_row["slug"], number),
                "edition": book_row["title"] + (f" ({book_row['year']})" if book_row["year"] else ""),
                "requester": call.caller.key_ref,
                "note": note.to_text(),
            }
        )
        etag = etag_with_xmp(etag, xmp)
        if services.settings.c2pa_sign:
            credentials = Delivery(
                title=f"{name}-{tier}{'-clean' if clean else ''}.jpg",
                # The catalog's sha256 is the stored public tier's; a clean copy's is computed when it is read.
                rendition_sha256="" if clean else rendition["sha256"],
                marked=not clean,
                key_ref=call.caller.key_ref,
                date=note.date.isoformat(),
                pool="images",
                institution=book_row["institution"],
                edition=edition_text(book_row["title"], book_row["year"]),
                citation_url=note.url,
                site_name=services.settings.site_name,
            )
    private = clean or call.caller.key_ref is not None
    return ImageDelivery(
        key=key,
        etag=etag,
        cache_control="private, no-store"
        if clean
        else ("private, max-age=86400" if private else "public, max-age=86400"),
        xmp=xmp,
        filename=f"{name}-{tier}{'-clean' if clean else ''}.jpg",
        clean=clean,
        credentials=credentials,
    )


@lru_cache(maxsize=16)
def _signing(settings: object) -> SigningPaths:
    return signing_paths(settings)


# Signing a file up to this size takes about a millisecond or two, about what handing it to a thread and back costs
# in CPU (futex wake-ups and GIL hand-overs: measured 2.6 against 3.6 ms of CPU a signed display tier, 550 KB), so it
# is done on the event loop like the rest of the request; larger files are signed in a thread.
SIGN_ON_LOOP_BYTES = 2 * 1024 * 1024
# Set by the first signature of this process, made in a thread: c2pa-python is imported by then.
_signed_once = threading.Event()


async def delivery_bytes(services: Services, delivery: ImageDelivery, stored: StoredObject) -> bytes:
    """The bytes that go out for ``delivery``: the stored object, with its XMP note spliced and then, for a key, a
    per-request C2PA manifest signed over the result (CPU work: under a millisecond for a display tier whose stored
    segments were hashed before, about 1 ms otherwise; files over ``SIGN_ON_LOOP_BYTES`` are signed in a thread).
    Raises ``Unavailable`` (503) when the signing key cannot be used: a keyed image never goes out unsigned."""
    data = stored.data
    if delivery.xmp is None:
        return data
    if delivery.credentials is None:  # signing is off: a manifest from ingest would no longer match once the note is in
        return splice_xmp(data, delivery.xmp, drop_c2pa=True)
    paths = _signing(services.settings)
    # The store's strong ETag is a digest of the object's bytes: with the key, it names this exact content.
    stored_key = (stored.info.key, stored.info.etag, len(data))
    if len(data) <= SIGN_ON_LOOP_BYTES and _signed_once.is_set():
        return _sign(data, delivery.xmp, delivery.credentials, paths, stored_key)
    # Large files, and the first signature of a process (c2pa-python's import and the key's loading take ~0.2 s).
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, _sign, data, delivery.xmp, delivery.credentials, paths, stored_key)


def _sign(stored: bytes, xmp: str, credentials: Delivery, paths: SigningPaths, stored_key: Hashable) -> bytes:
    """The note spliced and the result signed (the note is spliced here, so a file signed in a thread is copied
    there, not on the event loop)."""
    from imagesvc.provenance.sign import sign_delivery  # c2pa loads with the first signed delivery

    if not credentials.rendition_sha256:
        credentials = replace(credentials, rendition_sha256=hashlib.sha256(stored).hexdigest())
    signed = sign_delivery(stored, xmp, credentials, paths, stored_key)
    _signed_once.set()
    return signed
