"""IIIF Image API sources: which stored pixels an identifier stands for, under ``/image``'s entitlement rules, plus
the info.json document, the exact area-based image price, and rendering through the derivative cache (iiif/cache.py).

Entitlement is never decided here: every tier is located through ``locate_image``, so a caller gets the clean tiers
only where ``/image?clean=1`` would give them (otherwise 403), and the marked public tiers by default. The one
exception is the validator's test pattern, a single identifier configured in settings and read from a file; it follows
the same ``clean=1`` rule (403 without a full-tier key) and is priced like any other output.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from imagesvc.errors import NotFound
from imagesvc.iiif.cache import DerivativeCache
from imagesvc.iiif.image_api import FORMATS, QUALITIES, Limits, Plan, render
from imagesvc.imaging import TierSpec
from imagesvc.services import Services
from imagesvc.tools import Call
from imagesvc.tools.image_delivery import ImageDelivery, locate_image, require_clean

__all__ = [
    "IiifRuntime",
    "IiifSource",
    "SourceTier",
    "derivative_etag",
    "info_document",
    "price_milli",
    "produce",
    "render_price_milli",
    "resolve_source",
]

TILE = 512
CONTEXT = "http://iiif.io/api/image/3/context.json"
# Beyond level 2 we also offer these (level 2 itself already covers regions, sizes and 90-degree rotation).
EXTRA_FEATURES = ["baseUriRedirect", "cors", "jsonldMediaType", "mirroring", "sizeUpscaling"]


@dataclass(frozen=True)
class SourceTier:
    """One stored picture an output may be derived from: its object key (or file), pixel size and content hash."""

    key: str
    width: int
    height: int
    sha256: str
    path: Path | None = None


@dataclass(frozen=True)
class IiifSource:
    """What an IIIF identifier resolves to for this caller: tiers smallest first, the last being the full size."""

    identifier: str
    tiers: tuple[SourceTier, ...]
    clean: bool
    delivery: ImageDelivery | None  # the full tier as /image would deliver it (cache rule, XMP note); None: test image
    rights: str | None = None

    @property
    def full(self) -> SourceTier:
        return self.tiers[-1]


def _test_tier(path: Path) -> SourceTier:
    data = path.read_bytes()
    with Image.open(path) as img:
        width, height = img.size
    return SourceTier(key="", width=width, height=height, sha256=hashlib.sha256(data).hexdigest(), path=path)


async def resolve_source(services: Services, call: Call, identifier: str, *, clean: bool) -> IiifSource:
    """Resolve a page (``<bookId>-<n>``), illustration (``<bookId>-<n>:<index>``) or the configured test image.

    Raises ``NotFound`` (404) for unknown ids and pages without an image, ``Forbidden`` (403) for ``clean`` without a
    full-tier key, exactly as ``/image`` does.
    """
    settings = services.settings
    if settings.iiif_test_id and identifier == settings.iiif_test_id and settings.iiif_test_image:
        if clean:
            require_clean(call)  # the test pattern follows the one clean=1 rule like every other image
        tier = await asyncio.to_thread(_test_tier, Path(settings.iiif_test_image))
        return IiifSource(identifier, (tier,), clean=False, delivery=None)
    if ":" in identifier:
        where: dict[str, Any] = {"illustration": identifier}
    else:
        book, _, number = identifier.rpartition("-")
        if not book or not number.isdigit() or not 0 < int(number) < 2**31:
            raise NotFound(
                f"No image has the IIIF identifier {identifier!r}.",
                recovery=["Pages are <bookId>-<n>, illustrations <bookId>-<n>:<index>; see GET /books/<id>."],
                details={"identifier": identifier},
            )
        where = {"book": book, "page": int(number)}
    full = await locate_image(services, call, tier="full", clean=clean, **where)
    # locate_image succeeded, so the illustration or page and its live book exist.
    if "illustration" in where:
        ill: dict[str, Any] = await services.db.illustration(identifier)  # type: ignore[assignment]
        owner, book_row = ill["id"], await services.db.find_book(ill["book_id"]) or {}
    else:
        book_row = await services.db.find_book(where["book"]) or {}
        owner = (await services.db.page(book_row["id"], where["page"]))["id"]  # type: ignore[index]
    rows = (await services.db.renditions([owner]))[owner]
    tiers = []
    for name in ("display", "full"):
        if name not in rows:
            continue
        key = full.key if name == "full" else (await locate_image(services, call, tier=name, clean=clean, **where)).key
        row = rows[name]
        # A marked tier may be taller than the clean one (a mark strip below the page): each source says its own size.
        width, height = (
            (row["clean_width"] or row["width"], row["clean_height"] or row["height"])
            if clean
            else (
                row["width"],
                row["height"],
            )
        )
        tiers.append(SourceTier(key=key, width=width, height=height, sha256=row["sha256"]))
    license_url = book_row.get("license") or ""
    return IiifSource(
        identifier,
        tuple(tiers),
        clean=clean,
        delivery=full,
        rights=license_url if license_url.startswith("http") else None,
    )


def _scale_factors(width: int, height: int) -> list[int]:
    factors = [1]
    while max(width, height) / factors[-1] > TILE:
        factors.append(factors[-1] * 2)
    return factors


def info_document(source: IiifSource, service_id: str, limits: Limits) -> dict[str, Any]:
    """The info.json of ``source`` published at ``service_id`` (the URL without ``/info.json``)."""
    full = source.full
    sizes = sorted({(t.width, t.height) for t in source.tiers} | {_half for _half in _halvings(full)})
    doc: dict[str, Any] = {
        "@context": CONTEXT,
        "id": service_id,
        "type": "ImageService3",
        "protocol": "http://iiif.io/api/image",
        "profile": "level2",
        "width": full.width,
        "height": full.height,
        "maxWidth": limits.max_width,
        "maxHeight": limits.max_height,
        "maxArea": limits.max_area,
        "sizes": [{"width": w, "height": h} for w, h in sizes],
        "tiles": [{"width": TILE, "height": TILE, "scaleFactors": _scale_factors(full.width, full.height)}],
        "extraQualities": [q for q in QUALITIES if q != "default"],
        "extraFormats": [f for f in FORMATS if f != "jpg"],
        "extraFeatures": EXTRA_FEATURES,
    }
    if source.rights:
        doc["rights"] = source.rights
    return doc


def _halvings(full: SourceTier) -> set[tuple[int, int]]:
    out, factor = set(), 2
    while max(full.width, full.height) // factor >= 150:
        out.add((math.ceil(full.width / factor), math.ceil(full.height / factor)))
        factor *= 2
    return out


def price_milli(width: int, height: int, display_side: int) -> int:
    """The exact price of one output of ``width x height`` pixels, in thousandths of an image unit.

    One image unit buys one display-tier area (``display_side`` squared, 2000 x 2000 by default); an output pays its
    area's share of that, rounded up to the next thousandth and never less than one thousandth: a 512 x 512 deep-zoom
    tile costs 66 thousandths, a display-size page one unit, a 6000 x 8000 full page 12 units. No output is free and
    nothing is drawn at random, so the same request always costs the same and a HEAD tells nothing a GET would not.
    """
    return max(1, -(-width * height * 1000 // (display_side * display_side)))


RENDER_FLOOR_MILLI = 16  # no render costs less than a 256 x 256 tile (17): a 1 x 1 output decodes a source all the same
READ_SHARE = 64  # source pixels decoded per output pixel that a render's price counts as free (8x down each side)


def render_price_milli(source: IiifSource, plan: Plan, display_side: int) -> int:
    """The price of one IIIF render: the larger of its output's area price (``price_milli``), the source pixels it
    must decode (its region in the tier it is cut from, beyond ``READ_SHARE`` per output pixel's worth) and
    ``RENDER_FLOOR_MILLI``. Viewers' tiles pay their area as before (a 512-px tile 66); a tiny output cut from a large
    region pays for the decoding it causes, so renders cannot be bought by the hundred thousand for almost nothing."""
    width, height = plan.output_size
    tier = _pick(source, plan)
    scale = tier.width / source.full.width
    read = int(plan.region[2] * scale) * int(plan.region[3] * scale)
    decoded = -(-read * 1000 // (READ_SHARE * display_side * display_side))
    return max(price_milli(width, height, display_side), decoded, RENDER_FLOOR_MILLI)


def derivative_etag(source: IiifSource, plan: Plan) -> str:
    """Strong validator of one output: identifier, source pixels, clean or marked, and the canonical request."""
    full = source.full
    text = f"{source.identifier}|{full.key}|{full.sha256}|{'clean' if source.clean else 'marked'}|{plan.canonical}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass
class IiifRuntime:
    """Per-process IIIF state: the executor for pixel work, the derivative cache and the size limits."""

    pool: Executor
    cache: DerivativeCache
    limits: Limits


def _pick(source: IiifSource, plan: Plan) -> SourceTier:
    """The smallest tier that still holds at least as many pixels as the output needs from the region."""
    full = source.full
    for tier in source.tiers:
        scale = tier.width / full.width
        if plan.region[2] * scale >= plan.size[0] and plan.region[3] * scale >= plan.size[1]:
            return tier
    return full


async def produce(services: Services, runtime: IiifRuntime, source: IiifSource, plan: Plan, etag: str) -> bytes:
    """The encoded output of ``plan``: from the cache, else rendered in the runtime's executor and cached."""
    name = f"{etag}.{plan.format}"
    cached = await runtime.cache.get(name)
    if cached is not None:
        return cached
    tier = _pick(source, plan)
    if tier.path is not None:
        data = await asyncio.to_thread(tier.path.read_bytes)
    else:
        data = (await services.store.get(tier.key)).data
    settings = services.settings
    spec = TierSpec(max_pixels=settings.max_image_pixels)
    loop = asyncio.get_running_loop()
    size, full = (tier.width, tier.height), (source.full.width, source.full.height)
    body = await loop.run_in_executor(runtime.pool, render, data, plan, size, full, spec, settings.jpeg_quality)
    await runtime.cache.put(name, body, FORMATS[plan.format])
    return body
