"""An uploaded picture and its arguments, read from a request body within bounds that hold whatever is sent.

Bounds: the whole body (declared or counted, chunked or not) is at most the upload limit plus ``SLACK`` bytes; a
multipart form has at most ``MAX_PARTS`` parts, each field at most ``FIELD_BYTES`` and the image at most the upload
limit, and one ``image`` part; a compressed body (``Content-Encoding``) or part is refused unread, so no expansion has
to be bounded; the body must arrive within ``IMAGESVC_BODY_READ_TIMEOUT`` seconds (as every request body must:
``middleware.body_deadline_middleware``); parsing yields to the event loop after every part, so a form of many
small parts cannot hold the loop. Malformed multipart (no boundary) is a 400.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import BodyPartReader, MultipartReader, web
from aiohttp.helpers import parse_mimetype
from aiohttp.http_exceptions import HttpProcessingError

from imagesvc.errors import InvalidRequest, PayloadTooLarge, UnsupportedMediaType
from imagesvc.web.json_body import parse_object
from imagesvc.web.params import coerce

__all__ = ["FIELD_BYTES", "MAX_PARTS", "SLACK", "read_limited", "refuse_encoding", "upload_arguments"]

MAX_PARTS = 8  # the image and the tool's few arguments, with room for a browser's extra fields
FIELD_BYTES = 4096  # one form field other than the image
SLACK = 65536  # multipart framing and fields on top of the image itself
CHUNK = 65536
_PLAIN_TRANSFER = {"", "identity", "binary", "7bit", "8bit"}


def too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"The upload is larger than {limit:,} bytes, the most search by image accepts.",
        recovery=["Send a smaller picture: a crop or a JPEG of at most a few megabytes is plenty."],
        details={"max_bytes": limit},
    )


async def read_limited(stream: Any, limit: int, on_error: PayloadTooLarge | None = None) -> bytes:
    """All of ``stream`` (a request body or a multipart part, read raw), refused once it passes ``limit`` bytes."""
    chunks, size = [], 0
    while True:
        chunk = await (stream.read_chunk(CHUNK) if isinstance(stream, BodyPartReader) else stream.read(CHUNK))
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise on_error or too_large(limit)
        chunks.append(chunk)


def refuse_encoding(headers: Any, what: str = "The request body") -> None:
    """``UnsupportedMediaType`` for a compressed body or part: uploads are pictures, already compressed."""
    encoding = headers.get("Content-Encoding", "").strip().lower()
    transfer = headers.get("Content-Transfer-Encoding", "").strip().lower()
    if encoding not in ("", "identity") or transfer not in _PLAIN_TRANSFER:
        raise UnsupportedMediaType(
            f"{what} is sent with the encoding {encoding or transfer!r}; uploads are read as they are.",
            recovery=["Send the picture's bytes uncompressed (no Content-Encoding): JPEG and PNG are compressed."],
        )


def _typed(name: str, value: str, schema: dict[str, Any]) -> Any:
    prop = schema.get("properties", {}).get(name)
    return coerce(value, prop) if prop is not None else value


async def _multipart(request: web.Request, image_limit: int, schema: dict[str, Any]) -> dict[str, Any]:
    boundary = parse_mimetype(request.headers.get("Content-Type", "")).parameters.get("boundary", "")
    if not boundary or len(boundary) > 70:
        raise InvalidRequest(
            "The multipart body has no usable boundary in its Content-Type.",
            recovery=["Let the HTTP client write the multipart body and its Content-Type header (curl -F, a form)."],
        )
    body_limit = image_limit + SLACK
    args: dict[str, Any] = {}
    try:
        reader = MultipartReader(request.headers, request.content)
        parts = 0
        while True:
            part = await _next_part(reader)
            await asyncio.sleep(0)  # many small parts arrive buffered: let other requests run between them
            if part is None:
                break
            parts += 1
            if parts > MAX_PARTS:
                raise InvalidRequest(
                    f"The form has more than {MAX_PARTS} parts.", recovery=["Send the image and its arguments only."]
                )
            if not isinstance(part, BodyPartReader):
                raise InvalidRequest("A multipart form within a form is not read.")
            refuse_encoding(part.headers, f"The form field {part.name!r}")
            name = part.name or ""
            if name in args:
                raise InvalidRequest(f"The form field {name!r} is given twice; give it once.")
            if name == "image":
                args[name] = await read_limited(part, image_limit)
            else:
                raw = await read_limited(part, FIELD_BYTES, too_large_field(name))
                text = raw.decode("utf-8", "replace")
                if text.strip():  # an empty field counts as absent, as in a query string
                    args[name] = _typed(name, text, schema)
            if request.content.total_bytes > body_limit:
                raise too_large(image_limit)
    except (ValueError, HttpProcessingError) as exc:  # aiohttp's own complaint about a malformed body or part header
        raise InvalidRequest(f"The multipart body cannot be read: {str(exc)[:200]}") from None
    return args


async def _next_part(reader: MultipartReader) -> Any:
    """The form's next part; a first part named ``_charset_`` (RFC 7578 4.6) longer than a charset name is an
    ``InvalidRequest``: aiohttp raises a bare ``RuntimeError`` for it, which would be a 500."""
    try:
        return await reader.next()
    except RuntimeError as exc:
        raise InvalidRequest(
            f"The multipart body cannot be read: {str(exc)[:200]} (the form's _charset_ field is not a charset name).",
            recovery=["Leave out the _charset_ field, or give a charset name such as utf-8 in it."],
        ) from None


def too_large_field(name: str) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"The form field {name!r} is longer than {FIELD_BYTES} bytes.", details={"max_bytes": FIELD_BYTES}
    )


async def upload_arguments(
    request: web.Request, image_limit: int, schema: dict[str, Any], *, forms: tuple[str, ...]
) -> dict[str, Any]:
    """The arguments a body of one of ``forms`` (``multipart``, ``json``, ``image``) carries, ``image`` as bytes (or
    base64 text, from JSON); every bound above applies (the body's read deadline is the middleware's)."""
    refuse_encoding(request.headers)
    ctype = request.content_type
    json_limit = image_limit * 4 // 3 + SLACK
    declared = request.content_length
    if declared is not None and declared > (json_limit if ctype == "application/json" else image_limit + SLACK):
        raise too_large(image_limit)
    if ctype == "application/json" and "json" in forms:
        return parse_object(await read_limited(request.content, json_limit))  # image: base64 text
    if ctype.startswith("multipart/") and "multipart" in forms:
        return await _multipart(request, image_limit, schema)
    if (ctype.startswith("image/") or ctype == "application/octet-stream") and "image" in forms:
        return {"image": await read_limited(request.content, image_limit)}
    raise InvalidRequest(
        f"Search by image takes a picture, not {ctype or 'an untyped body'}.",
        recovery=[
            "Send the image bytes with Content-Type image/jpeg (or png, tiff, webp), a multipart form with an "
            '\'image\' file field, or JSON {"image": "<base64>"}.'
            if "image" in forms
            else "Send a multipart form with an 'image' file field."
        ],
    )
