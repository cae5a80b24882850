"""``POST /gallery/search-by-image``: an uploaded picture -> ``search_images_by_image``.

The body is the picture itself (``Content-Type: image/...``, the other arguments in the query string), a multipart
form (an ``image`` file field; the other fields are the tool's arguments), or JSON with the tool's arguments
(``image`` in base64). All three are declared (``QUERY`` and ``BODY``), so OpenAPI and ``/llms.txt`` document them
and the query string is read through the tool's own schema; an argument given both in the query and in the body is a
400. The body is read within ``web.uploads``' bounds (size, parts, encoding, time); the upload is metered like every
request by the access middleware.
"""

from __future__ import annotations

import base64
from typing import Any

from aiohttp import web

from imagesvc import tools
from imagesvc.errors import InvalidRequest
from imagesvc.tools.image_search import SCHEMA, upload_limit
from imagesvc.tools.image_work import image_work
from imagesvc.web.app_keys import SERVICES
from imagesvc.web.params import QUERY_SCHEMA, declare_body, query_arguments
from imagesvc.web.rest import TOOL as TOOL_ATTRIBUTE
from imagesvc.web.rest import tool_call
from imagesvc.web.uploads import read_limited, upload_arguments

__all__ = ["BODY", "FORM", "QUERY", "read_limited", "search_by_image"]

TOOL = "search_images_by_image"
_ARGUMENTS = {k: v for k, v in SCHEMA["properties"].items() if k != "image"}
# The query string: every argument but the picture (which is the body).
QUERY: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": _ARGUMENTS}
# A multipart form: the picture as a file field, the other arguments as text fields.
FORM: dict[str, Any] = {
    "type": "object",
    "required": ["image"],
    "properties": {
        "image": {"type": "string", "format": "binary", "description": "The picture file (JPEG, PNG, TIFF, WebP)."},
        **_ARGUMENTS,
    },
}
BODY: dict[str, dict[str, Any]] = {
    "image/*": {"type": "string", "format": "binary", "description": "The picture's bytes; arguments in the query."},
    "multipart/form-data": FORM,
    "application/json": {"type": "object", "additionalProperties": False, **SCHEMA},
}


def as_tool_arguments(args: dict[str, Any]) -> dict[str, Any]:
    """``args`` with a picture read as bytes put into the tool's base64 argument."""
    if isinstance(args.get("image"), bytes):
        args = args | {"image": base64.b64encode(args["image"]).decode()}
    return args


async def search_by_image(request: web.Request) -> web.Response:
    """Search by image: the illustrations printed from the same woodblock or plate as the uploaded picture (and,
    with CLIP, the visually similar ones). Body: the image (Content-Type image/*, arguments in the query string), a
    multipart form with an 'image' file field and the arguments as fields, or JSON {"image": "<base64>", ...};
    arguments book_id and limit. 413 past the upload limit, 415 for a compressed body, 408 for a body that does not
    arrive in time, 422 for a file that is not a usable image, 429/503 with Retry-After when searches are full."""
    services = request.app[SERVICES]
    in_query = query_arguments(request, QUERY)
    caller = tool_call(request).caller.subject
    async with image_work(services).caller_slot(caller):  # taken before the upload is read, held until the answer
        args = await upload_arguments(request, upload_limit(services), FORM, forms=("json", "multipart", "image"))
        for name in in_query.keys() & args.keys():
            raise InvalidRequest(f"{name!r} is given both in the query string and in the body; give it once.")
        args |= in_query
        if "image" not in args:
            raise InvalidRequest("No image was sent.", recovery=["Put the picture in a multipart field named 'image'."])
        return web.json_response(await tools.call(services, TOOL, as_tool_arguments(args), tool_call(request)))


setattr(search_by_image, QUERY_SCHEMA, QUERY)
setattr(search_by_image, TOOL_ATTRIBUTE, TOOL)
declare_body(search_by_image, BODY)
