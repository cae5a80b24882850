"""The ``search_images_by_image`` tool: an uploaded picture (base64) -> the illustrations printed from the same
woodblock or plate, and with CLIP configured the visually similar ones."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from imagesvc.errors import ImageRejected, ImagesvcError, InvalidRequest
from imagesvc.imaging import TierSpec
from imagesvc.imaging.tiers import decode
from imagesvc.search.by_image import BlockMatch, matcher_for
from imagesvc.search.engine import engine_for
from imagesvc.search.ranking import Query, rank
from imagesvc.services import Services
from imagesvc.tools import Call, tool
from imagesvc.tools.books import require_book
from imagesvc.tools.gallery import gallery_items
from imagesvc.tools.image_work import decode_cost, image_work

__all__ = ["PayloadTooLarge", "decode_upload", "search_images_by_image"]

DECODE_SIDE = 1200  # an upload is decoded (JPEG, DCT scaling) or reduced to about this: matching needs no more
HEAD_CHARS = 65536  # base64 characters decoded first, to price a search by its header before admitting it
MAX_BASE64 = 14_000_000  # characters: 10 MiB of image once decoded; the setting may lower the byte limit


class PayloadTooLarge(ImagesvcError):
    code = "payload_too_large"
    status = 413


def upload_limit(services: Services) -> int:
    return int(services.settings.upload_max_bytes)


def decode_upload(services: Services, data: bytes) -> Any:
    """The uploaded bytes as an RGB image of at most ``DECODE_SIDE`` px a side, made in this thread: a JPEG decoded at
    reduced scale, any other picture reduced in its own mode before the RGB conversion (no full-size RGB copy).
    ``PayloadTooLarge`` past the byte limit, ``ImageRejected`` (422) for a non-image, a lying header, a corrupt file
    or more pixels than allowed (a decompression bomb)."""
    limit = upload_limit(services)
    if len(data) > limit:
        raise PayloadTooLarge(
            f"The image is {len(data):,} bytes; search by image accepts at most {limit:,}.",
            recovery=["Send a smaller picture: a crop or a JPEG of at most a few megabytes is plenty."],
            details={"max_bytes": limit},
        )
    if not data:
        raise InvalidRequest("No image was sent.", recovery=["Send the picture's bytes (JPEG, PNG, TIFF, WebP)."])
    spec = TierSpec(max_pixels=services.settings.upload_max_pixels)
    try:
        _, rgb = decode(data, spec, longest=DECODE_SIDE, reduce=True)
    except ImageRejected as exc:
        raise ImageRejected(
            f"The upload is not a usable image: {exc.message}",
            recovery=[
                "Send a JPEG, PNG, TIFF or WebP file as it is (not an HTML page or a screenshot container).",
                f"At most {spec.max_pixels:,} pixels: scale a large scan down first.",
            ],
            details=exc.details,
        ) from exc
    if max(rgb.size) > DECODE_SIDE:
        factor = max(rgb.size) // DECODE_SIDE
        if factor > 1:
            rgb = rgb.reduce(factor)  # a box filter on whole blocks: fast, and drops the full-size pixels at once
        rgb.thumbnail((DECODE_SIDE, DECODE_SIDE))
    return rgb


SCHEMA = {
    "required": ["image"],
    "properties": {
        "image": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_BASE64,
            "contentEncoding": "base64",
            "description": "The picture, base64-encoded (JPEG, PNG, TIFF or WebP): a scan, a crop, a photo of a page.",
        },
        "book_id": {"type": "string", "minLength": 1, "description": "Only illustrations of this book (id or slug)."},
        "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 20},
    },
}


@tool("search_images_by_image", SCHEMA)
async def search_images_by_image(
    services: Services, call: Call, image: str, book_id: str | None = None, limit: int = 20
) -> dict[str, Any]:
    """Find the illustrations printed from the same woodblock or plate as a picture (tolerant of crops, borders,
    rescans and photos of a page region), and with CLIP configured the visually similar ones.

    ``same_block`` lists matches best first with ``match`` (correlation of the aligned pictures, 1.0 identical) and
    ``distance`` (bits between their closest perceptual hashes); ``possible_printings`` lists, apart, pictures
    that line up with the upload but that no rule calls the same block (another hand's recut, a partial fit), to
    judge by eye; ``similar`` is null when CLIP is off. Not base64, not
    an image, too large or a decompression bomb: a 4xx error that says which.
    """
    work = image_work(services)
    head = _unbase64(image[:HEAD_CHARS])
    whole = len(image) <= HEAD_CHARS  # an unreadable whole upload is junk; an unreadable head, of unknown size
    cost = decode_cost(head, DECODE_SIDE, unreadable=DECODE_SIDE * DECODE_SIDE * 3 if whole else work.memory)
    async with work.admit(call.caller.subject, cost):
        data = await work.run(_unbase64, image)
        return await search_by_picture(services, data, book_id, limit)


def _unbase64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidRequest(
            "The image argument is not valid base64.",
            recovery=["Encode the file's bytes with standard base64 (RFC 4648), no data: prefix."],
            details={"argument": "image"},
        ) from exc


async def search_by_picture(services: Services, data: bytes, book_id: str | None, limit: int) -> dict[str, Any]:
    """The tool's work on raw bytes, once admitted (``image_work``): decoding on the search pool, then matching."""
    picture = await image_work(services).run(decode_upload, services, data)
    book = (await require_book(services, book_id))["id"] if book_id is not None else None
    engine = engine_for(services)
    snap = await engine.snapshot()
    table = snap.table
    live = {iid for iid, ok, b in zip(table.ids, table.live, table.book, strict=True) if ok}
    if book is not None:
        live = {iid for iid in live if table.book_ids[table.book[table.row_of(iid)]] == book}  # type: ignore[index]
    found = await matcher_for(services).printings(picture, live, run=image_work(services).run)
    same = await _items(services, found.same_block[:limit])
    possible = await _items(services, found.possible[:limit])
    similar = None
    if snap.matrix is not None and engine.encoder is not None:
        vector = (await image_work(services).run(engine.encoder.encode_images, [picture]))[0]
        q = Query(book_ids=(book,) if book else None, max_per_book=1000, limit=limit)
        ranked = await image_work(services).run(rank, table, q, snap.matrix, vector, None)
        extra = [{"similarity": s} for s in ranked.similarity]
        similar = await gallery_items(services, [table.ids[r] for r in ranked.rows], extra)
    status = engine.status(snap)
    status["blocks"] = matcher_for(services).state()
    status["signals"] = ["block-hashes", *(["clip"] if similar is not None else [])]
    return {
        "same_block": same,
        "possible_printings": possible,
        "similar": similar,
        "books": sorted({i["book_id"] for i in same}),
        "width": picture.width,
        "height": picture.height,
        "search": status,
    }


async def _items(services: Services, matches: list[BlockMatch]) -> list[dict[str, Any]]:
    """Gallery items of ``matches``, each with its ``match`` and ``distance``."""
    extra = [{"match": m.correlation, "distance": m.distance} for m in matches]
    return await gallery_items(services, [m.id for m in matches], extra)
