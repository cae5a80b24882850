"""IIIF handlers: Image API 3.0 (base redirect, info.json, image requests) and Presentation 3 manifests/collections.

Image requests follow ``/image``'s rules: marked by default, ``?clean=1`` only for full-tier keys (403 otherwise),
304s count nothing, and every delivered output is charged to the image pool at its exact price by area (see
docs/iiif.md): reserved before rendering, committed by the access middleware once the bytes went out. Every Image API
response (info.json, redirects, errors and 304s included) states the image pool in its RateLimit fields.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from aiohttp import web

from imagesvc.iiif.delivery import derivative_etag, info_document, produce, render_price_milli, resolve_source
from imagesvc.iiif.image_api import FORMATS, parse_request
from imagesvc.iiif.presentation import collection_document, collections_index, manifest_document
from imagesvc.imaging.xmp import etag_with_xmp, splice_xmp
from imagesvc.web.app_keys import IIIF, METER, SERVICES
from imagesvc.web.images import not_modified
from imagesvc.web.params import accepts
from imagesvc.web.responses import BytesResponse
from imagesvc.web.rest import tool_call

__all__ = ["base_redirect", "collection", "collections", "image", "info", "manifest", "service_base"]

IMAGE_CONTEXT = "http://iiif.io/api/image/3/context.json"
PRESENTATION_CONTEXT = "http://iiif.io/api/presentation/3/context.json"
PROFILE_LINK = '<http://iiif.io/api/image/3/level2.json>;rel="profile"'


def service_base(request: web.Request) -> str:
    """The IIIF base of every id and ``Location``: ``IMAGESVC_SITE_URL/iiif/3`` when the site URL is configured (a
    client's ``Host`` header is never reflected), else ``scheme://host/iiif/3`` as the client addressed us, in which
    case the response varies by ``Host`` (``host_vary``), so a cache never serves one Host's ids to another."""
    settings = request.app[SERVICES].settings
    if settings.site_url_configured:
        return f"{settings.site_url.rstrip('/')}/iiif/3"
    return f"{request.scheme}://{request.host}/iiif/3"


def host_vary(request: web.Request) -> list[str]:
    """``["Host"]`` when ids are built from the request's Host header, else nothing."""
    return [] if request.app[SERVICES].settings.site_url_configured else ["Host"]


def _json_ld(request: web.Request, body: dict[str, object], context: str, headers: dict[str, str]) -> web.Response:
    """JSON-LD with its profile when the client asks for it, plain JSON otherwise."""
    wants_ld = "application/ld+json" in request.headers.get("Accept", "")
    ctype = f'application/ld+json;profile="{context}"' if wants_ld else "application/json"
    headers = {**headers, "Content-Type": ctype, "Vary": ", ".join(["Accept", "Authorization", *host_vary(request)])}
    return web.Response(body=json.dumps(body, ensure_ascii=False).encode(), headers=headers)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def stating_images(handler: Handler) -> Handler:
    """Make ``handler``'s responses, errors included, carry the caller's image pool in RateLimit (read, not spent)."""

    @functools.wraps(handler)
    async def wrapped(request: web.Request) -> web.StreamResponse:
        meter = request[METER]
        try:
            return await handler(request)
        finally:
            if "images" not in meter.states and meter.caller.allowance.budget("images") is not None:
                await meter.state("images")  # uncapped pools state no quota

    return wrapped


@stating_images
async def base_redirect(request: web.Request) -> web.Response:
    """``GET /iiif/3/{id}``: 303 to its info.json (a 404 first when the id is unknown)."""
    identifier = request.match_info["identifier"]
    await resolve_source(request.app[SERVICES], tool_call(request), identifier, clean=False)
    location = f"{service_base(request)}/{quote(identifier, safe=':')}/info.json"
    vary = {"Vary": "Host"} if host_vary(request) else {}
    return web.Response(status=303, headers={"Location": location, **vary})


CLEAN = {
    "properties": {
        "clean": {"type": "boolean", "default": False, "description": "Unmarked pixels (full-tier keys only)."}
    }
}


@stating_images
@accepts(CLEAN)
async def info(request: web.Request, arguments: dict[str, Any]) -> web.Response:
    """IIIF Image API 3.0 image information: sizes, tiles, limits, features."""
    identifier = request.match_info["identifier"]
    clean = arguments["clean"]
    source = await resolve_source(request.app[SERVICES], tool_call(request), identifier, clean=clean)
    service_id = f"{service_base(request)}/{quote(identifier, safe=':')}"
    body = info_document(source, service_id, request.app[IIIF].limits)
    cache = source.delivery.cache_control if source.delivery else "public, max-age=86400"
    return _json_ld(request, body, IMAGE_CONTEXT, {"Cache-Control": cache, "Link": PROFILE_LINK})


@stating_images
@accepts(CLEAN)
async def image(request: web.Request, arguments: dict[str, Any]) -> web.StreamResponse:
    """A region of a page or illustration, scaled, rotated, in a quality and format (IIIF Image API 3.0)."""
    services, runtime, m = request.app[SERVICES], request.app[IIIF], request.match_info
    call = tool_call(request)
    source = await resolve_source(services, call, m["identifier"], clean=arguments["clean"])
    full = source.full
    plan = parse_request(
        m["region"], m["size"], m["rotation"], m["quality_format"], full.width, full.height, runtime.limits
    )
    pixels_etag = derivative_etag(source, plan)
    delivery = source.delivery
    xmp = delivery.xmp if delivery is not None and plan.format == "jpg" else None
    etag = etag_with_xmp(pixels_etag, xmp)
    headers = {
        "ETag": f'"{etag}"',
        "Cache-Control": delivery.cache_control if delivery else "public, max-age=86400",
        "Vary": "Authorization",
        "Link": PROFILE_LINK,
    }
    if not_modified(request, etag):
        return web.Response(status=304, headers=headers)  # a 304 delivers nothing and counts nothing
    # Priced before any pixel work, by what the render costs (docs/iiif.md); on a HEAD the meter only checks (a 429
    # where GET gets one, nothing spent).
    await call.meter.reserve_milli("images", render_price_milli(source, plan, services.settings.display_size))
    body = await produce(services, runtime, source, plan, pixels_etag)
    if xmp:
        body = splice_xmp(body, xmp)
    return BytesResponse(body, content_type=FORMATS[plan.format], headers=headers)


async def manifest(request: web.Request) -> web.Response:
    """``GET /iiif/3/manifest/{book_id}``: the book as a Presentation 3 Manifest."""
    body = await manifest_document(request.app[SERVICES], request.match_info["book_id"], service_base(request))
    return _json_ld(request, body, PRESENTATION_CONTEXT, {"Cache-Control": "public, max-age=3600"})


async def collection(request: web.Request) -> web.Response:
    """``GET /iiif/3/collection/{slug}``: a curated collection as a Presentation 3 Collection."""
    body = await collection_document(request.app[SERVICES], request.match_info["slug"], service_base(request))
    return _json_ld(request, body, PRESENTATION_CONTEXT, {"Cache-Control": "public, max-age=3600"})


async def collections(request: web.Request) -> web.Response:
    """``GET /iiif/3/collections``: every curated collection as one top-level Collection."""
    body = await collections_index(request.app[SERVICES], service_base(request))
    return _json_ld(request, body, PRESENTATION_CONTEXT, {"Cache-Control": "public, max-age=3600"})
