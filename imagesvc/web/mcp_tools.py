"""MCP tool results: list the registry as MCP tools, run one call on its own meter, and shape its result or error.

Each ``tools/call`` reserves on a meter of its own. A failed call refunds its reservations at once (its JSON-RPC
response is still a 200, so the access middleware would otherwise commit them); a successful call hands them to the
request's meter, which the access middleware commits once the response went out, or refunds if it did not.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Iterator
from typing import Any

from aiohttp import web

from imagesvc import tools
from imagesvc.access.meter import Meter
from imagesvc.errors import ImagesvcError, InternalError, RateLimited
from imagesvc.services import Services
from imagesvc.web.keys import CALLER, METER, METRICS, REQUEST_DENIED, SERVICES

__all__ = [
    "MAX_THUMBNAILS",
    "MAX_THUMB_BYTES",
    "THUMB_FIELDS",
    "error_result",
    "image_blocks",
    "list_tools",
    "run_tool",
    "tool_entry",
]

log = logging.getLogger("imagesvc.mcp")

# A call that asks (include_images) gets a few small pictures the model can look at: thumb tier only, bounded in
# count and size. Off by default: four thumbnails are about 92 KB of base64 in every answer.
MAX_THUMBNAILS = 4
MAX_THUMB_BYTES = 96 * 1024
THUMB_FIELDS = frozenset({"image_thumb"})
IMAGES_ARGUMENT = "include_images"  # declared by the tools whose results name thumbnails; image content is opt-in


def tool_entry(spec: tools.Tool) -> dict[str, Any]:
    """One ``tools/list`` entry: name, description, inputSchema, outputSchema (if any) and annotations."""
    entry: dict[str, Any] = {"name": spec.name, "description": spec.description, "inputSchema": spec.input_schema}
    if spec.output_schema is not None:
        entry["outputSchema"] = spec.output_schema
    annotations = {"readOnlyHint": True} if spec.read_only else {}
    annotations.update(spec.annotations)
    if annotations:
        entry["annotations"] = annotations
    return entry


def list_tools() -> list[dict[str, Any]]:
    """Every registered tool, sorted by name."""
    return [tool_entry(spec) for _, spec in sorted(tools.load_all().items())]


def error_result(error: ImagesvcError) -> dict[str, Any]:
    """A failed call as an MCP result: ``isError`` with ``{error, message, retry_after?, recovery, ...}``."""
    body = error.to_dict()
    retry = error.details.get("retry_after_seconds", error.details.get("retry_after"))
    if retry is not None:
        body["retry_after"] = retry
    text = {"type": "text", "text": json.dumps(body, ensure_ascii=False)}
    return {"content": [text], "structuredContent": body, "isError": True}


async def run_tool(request: web.Request, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Call tool ``name`` for this request's caller; every failure comes back as an ``isError`` result."""
    services: Services = request.app[SERVICES]
    denied = request.get(REQUEST_DENIED)
    if denied is not None:
        if isinstance(denied, RateLimited):
            request.app[METRICS].count_rejection(denied, request[CALLER].policy)
        return error_result(denied)
    shared: Meter = request[METER]
    meter = Meter(shared.access, shared.caller)
    try:
        result = await tools.call(services, name, arguments, tools.Call(caller=request[CALLER], meter=meter))
        images = await image_blocks(services, result) if wants_images(name, arguments) else []
    except ImagesvcError as exc:
        await meter.settle(False)
        shared.states.update(meter.states)
        if isinstance(exc, RateLimited):  # an HTTP 429 is counted by the middleware; this one travels as a result
            request.app[METRICS].count_rejection(exc, request[CALLER].policy)
        return error_result(exc)
    except Exception:
        log.exception("tool %s failed", name)
        await meter.settle(False)
        return error_result(InternalError(f"The tool {name} failed inside the service."))
    except BaseException:
        await asyncio.shield(meter.settle(False))
        raise
    shared.adopt(meter)
    text = {"type": "text", "text": json.dumps(result, ensure_ascii=False)}
    return {"content": [text, *images], "structuredContent": result, "isError": False}


def wants_images(name: str, arguments: dict[str, Any]) -> bool:
    """Whether this call asked for image content: ``include_images`` (off by default) on tools that declare it."""
    declared = tools.load_all()[name].input_schema.get("properties", {}).get(IMAGES_ARGUMENT)
    return declared is not None and bool(arguments.get(IMAGES_ARGUMENT, declared.get("default", False)))


def _thumb_urls(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key in THUMB_FIELDS and isinstance(item, str):
                yield item
            else:
                yield from _thumb_urls(item)
    elif isinstance(value, list):
        for item in value:
            yield from _thumb_urls(item)


async def image_blocks(services: Services, result: dict[str, Any]) -> list[dict[str, Any]]:
    """Image content for the first few thumbnail URLs on the image host in ``result``, read from the object store.

    Only public (``pub/``) objects are read, so nothing is shown that the URL would not serve to anyone; a thumbnail
    that is missing, unreadable or too large is left out rather than failing the call.
    """
    base = services.settings.image_base.rstrip("/") + "/"
    keys: list[str] = []
    for url in _thumb_urls(result):
        key = "pub/" + url.removeprefix(base)
        if url.startswith(base) and ".." not in key and key not in keys:
            keys.append(key)
        if len(keys) == MAX_THUMBNAILS:
            break

    async def fetch(key: str) -> dict[str, Any] | None:
        try:
            stored = await services.store.get(key)
        except Exception as exc:  # a picture for the model is optional; the call's result is not
            log.warning("thumbnail %s not shown: %s", key, exc)
            return None
        if len(stored.data) > MAX_THUMB_BYTES:
            return None
        return {"type": "image", "data": base64.b64encode(stored.data).decode("ascii"), "mimeType": "image/jpeg"}

    blocks = await asyncio.gather(*(fetch(key) for key in keys))
    return [block for block in blocks if block is not None]
