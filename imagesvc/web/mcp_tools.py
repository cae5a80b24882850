"""MCP tool results: list the registry as MCP tools, run one call on its own meter, and shape its result or error.

Each ``tools/call`` counts as one request against the caller's request limit (``Post.admit``: the POST's own hit
pays for its first call) and is answered only while the POST's answers stay under ``MAX_RESPONSE_BYTES``.

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
from imagesvc.access import Allowed
from imagesvc.access.headers import rate_limited
from imagesvc.access.meter import Meter
from imagesvc.errors import ImagesvcError, InternalError, InvalidRequest, RateLimited
from imagesvc.services import Services
from imagesvc.web.app_keys import ACCESS, CALLER, METER, METRICS, REQUEST_DENIED, SERVICES

__all__ = [
    "MAX_RESPONSE_BYTES",
    "MAX_THUMBNAILS",
    "MAX_THUMB_BYTES",
    "THUMB_FIELDS",
    "Post",
    "encode",
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
MAX_RESPONSE_BYTES = 4 * 1024**2  # what one POST's answers may add up to; the first answer is always sent whole
ENVELOPE_BYTES = 256  # room for a reply's jsonrpc, id and result keys around a tool result


def encode(value: Any) -> str:
    """Strict JSON: ``ValueError`` rather than the non-JSON NaN or Infinity."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


class Post:
    """What one POST to /mcp has used so far: tool calls counted, answer bytes sent, and a request-limit denial."""

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.calls = 0
        self.sent = 0  # bytes of the replies encoded so far
        self.full = False  # once a call's answer did not fit, later calls are not run
        self.denied: ImagesvcError | None = request.get(REQUEST_DENIED)  # rate limited, or a bad key

    async def admit(self) -> ImagesvcError | None:
        """Count one tool call against the caller's request limit; the denial, if the limit is spent."""
        self.calls += 1
        if self.denied is not None or self.calls == 1:  # the access middleware counted the POST: its first call
            return self.denied
        caller = self.request[CALLER]
        allowance = caller.allowance
        limit = allowance.request_limit()
        if limit is None:
            return None
        hit = await self.request.app[ACCESS].hit(caller.subject, limit, allowance.request_window)
        if not isinstance(hit, Allowed):
            self.denied = rate_limited(allowance, "requests", hit)
        return self.denied

    def fits(self, size: int) -> bool:
        """Whether an answer of ``size`` bytes still fits this POST (the first always does)."""
        return self.sent == 0 or self.sent + size + ENVELOPE_BYTES <= MAX_RESPONSE_BYTES


def _too_large(name: str) -> InvalidRequest:
    return InvalidRequest(
        f"This POST's answers reached {MAX_RESPONSE_BYTES // 1024**2} MiB, so this {name} call was not answered "
        "and spent nothing.",
        recovery=["Send this call again in another POST: split large batches, especially of calls with images."],
        details={"max_response_bytes": MAX_RESPONSE_BYTES},
    )


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


async def run_tool(request: web.Request, name: str, arguments: dict[str, Any], post: Post) -> dict[str, Any]:
    """Call tool ``name`` for this request's caller; every failure comes back as an ``isError`` result."""
    services: Services = request.app[SERVICES]
    if post.full:
        return error_result(_too_large(name))
    try:
        denied = await post.admit()
    except ImagesvcError as exc:  # the access store is down: nothing may be delivered
        return error_result(exc)
    if denied is not None:
        if isinstance(denied, RateLimited):
            request.app[METRICS].count_rejection(denied, request[CALLER].policy)
        return error_result(denied)
    shared: Meter = request[METER]
    meter = Meter(shared.access, shared.caller, alive=shared.alive)
    try:
        result = await tools.call(services, name, arguments, tools.Call(caller=request[CALLER], meter=meter))
        images = await image_blocks(services, result) if wants_images(name, arguments) else []
        answer = {"content": [{"type": "text", "text": encode(result)}, *images], "structuredContent": result}
        size = len(encode(answer).encode())  # a result that is not strict JSON fails here, as the tool's fault
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
    answer["isError"] = False
    if not post.fits(size):
        await meter.settle(False)
        post.full = True
        return error_result(_too_large(name))
    shared.adopt(meter)
    return answer


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
