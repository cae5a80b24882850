"""``POST /gallery/search-by-image``: an uploaded picture -> ``search_images_by_image``.

The body is the picture itself (``Content-Type: image/...``, arguments in the query string), a multipart form (an
``image`` file field; other fields are the tool's arguments), or JSON with the tool's arguments (``image`` in
base64). The body is read with this route's own limit (``IMAGESVC_UPLOAD_MAX_BYTES``), so an oversized upload is a
413 in the JSON error shape, never a bare aiohttp page; it is metered like every request by the access middleware.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from aiohttp import BodyPartReader, web

from imagesvc import tools
from imagesvc.errors import InvalidRequest
from imagesvc.tools.image_search import MAX_BASE64, PayloadTooLarge, upload_limit
from imagesvc.web.app_keys import SERVICES
from imagesvc.web.rest import tool_call

__all__ = ["read_limited", "search_by_image"]

TOOL = "search_images_by_image"
_ARGUMENTS = ("book_id", "limit")


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"The upload is larger than {limit:,} bytes, the most search by image accepts.",
        recovery=["Send a smaller picture: a crop or a JPEG of at most a few megabytes is plenty."],
        details={"max_bytes": limit},
    )


async def read_limited(stream: Any, limit: int) -> bytes:
    """All of ``stream`` (a request body or a multipart part), refusing it once it passes ``limit`` bytes."""
    chunks, size = [], 0
    while True:
        chunk = await (stream.read_chunk(65536) if isinstance(stream, BodyPartReader) else stream.read(65536))
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)


def _typed(name: str, value: str) -> Any:
    if name == "limit":
        try:
            return int(value)
        except ValueError:
            raise InvalidRequest(
                f"{name!r} must be a whole number, not {value!r}.", details={"argument": name}
            ) from None
    return value


async def search_by_image(request: web.Request) -> web.Response:
    """Search by image: the illustrations printed from the same woodblock or plate as the uploaded picture (and,
    with CLIP, the visually similar ones). Body: the image (Content-Type image/*), a multipart form with an 'image'
    field, or JSON {"image": "<base64>"}; arguments book_id and limit. 413 past the upload limit, 422 for a file that
    is not a usable image."""
    services = request.app[SERVICES]
    limit = upload_limit(services)
    ctype = request.content_type
    json_limit = min(MAX_BASE64, limit * 4 // 3 + 8) + 65536
    declared = request.content_length
    if declared is not None and declared > (json_limit if ctype == "application/json" else limit + 65536):
        raise _too_large(limit)
    args: dict[str, Any] = {k: _typed(k, v) for k, v in request.query.items() if k in _ARGUMENTS}
    if ctype == "application/json":
        try:
            body = json.loads(await read_limited(request.content, json_limit))
        except (ValueError, UnicodeDecodeError):
            raise InvalidRequest("The request body is not valid JSON.") from None
        if not isinstance(body, dict):
            raise InvalidRequest("The JSON body must be an object of the tool's arguments (image in base64).")
        args |= body
    elif ctype.startswith("multipart/"):
        reader = await request.multipart()
        async for part in reader:
            if not isinstance(part, BodyPartReader) or part.name is None:
                continue
            if part.name == "image":
                args["image"] = base64.b64encode(await read_limited(part, limit)).decode()
            else:
                args[part.name] = _typed(part.name, (await read_limited(part, 4096)).decode("utf-8", "replace"))
    elif ctype.startswith("image/") or ctype == "application/octet-stream":
        args["image"] = base64.b64encode(await read_limited(request.content, limit)).decode()
    else:
        raise InvalidRequest(
            f"Search by image takes a picture, not {ctype or 'an untyped body'}.",
            recovery=[
                "Send the image bytes with Content-Type image/jpeg (or png, tiff, webp), a multipart form with an "
                '\'image\' file field, or JSON {"image": "<base64>"}.'
            ],
        )
    if "image" not in args:
        raise InvalidRequest("No image was sent.", recovery=["Put the picture in a multipart field named 'image'."])
    return web.json_response(await tools.call(services, TOOL, args, tool_call(request)))
