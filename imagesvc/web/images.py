"""``GET /image``: a page or illustration tier, marked by default, clean for full-tier keys; one image unit each."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from imagesvc.imaging import TIERS
from imagesvc.tools.image_delivery import delivery_bytes, locate_image
from imagesvc.web.app_keys import SERVICES
from imagesvc.web.params import accepts
from imagesvc.web.responses import BytesResponse
from imagesvc.web.rest import tool_call

__all__ = ["image", "not_modified"]


def not_modified(request: web.Request, etag: str) -> bool:
    """Whether the request's If-None-Match names ``etag`` (or ``*``): the one 304 rule of /image and IIIF."""
    header = request.headers.get("If-None-Match", "")
    return header.strip() == "*" or any(tag.strip().removeprefix("W/") == f'"{etag}"' for tag in header.split(","))


IMAGE_PARAMS = {
    "properties": {
        "book_id": {"type": "string", "minLength": 1, "description": "Book id or slug.", "x-aliases": ["book"]},
        "page": {"type": "integer", "minimum": 1, "maximum": 1_000_000, "description": "Page number (with book_id)."},
        "illustration": {"type": "string", "minLength": 1, "description": "Illustration id, instead of a page."},
        "tier": {"enum": list(TIERS), "default": "display"},
        "clean": {"type": "boolean", "default": False, "description": "Unmarked copy; full-tier keys only."},
    }
}


@accepts(IMAGE_PARAMS)
async def image(request: web.Request, arguments: dict[str, Any]) -> web.StreamResponse:
    """A page or illustration image tier, marked unless clean=1 with a full-tier key; one image unit."""
    services = request.app[SERVICES]
    call = tool_call(request)
    delivery = await locate_image(
        services,
        call,
        book=arguments.get("book_id"),
        page=arguments.get("page"),
        illustration=arguments.get("illustration"),
        tier=arguments["tier"],
        clean=arguments["clean"],
    )
    # A per-request C2PA manifest carries its own salt and time, so a signed delivery's bytes differ on every request:
    # its ETag is weak (same image and note), never a promise of identical bytes.
    tag = f'W/"{delivery.etag}"' if delivery.credentials is not None else f'"{delivery.etag}"'
    headers = {"ETag": tag, "Cache-Control": delivery.cache_control, "Vary": "Authorization"}
    if not_modified(request, delivery.etag):
        return web.Response(status=304, headers=headers)  # a 304 delivers nothing and counts nothing
    await call.meter.reserve("images", 1)  # on a HEAD the meter only checks: a 429 where GET gets one, nothing spent
    stored = await services.store.get(delivery.key)
    body = await delivery_bytes(services, delivery, stored)  # XMP note, then the C2PA manifest for a key
    headers["Content-Disposition"] = f'inline; filename="{delivery.filename}"'
    return BytesResponse(body, content_type="image/jpeg", headers=headers)
