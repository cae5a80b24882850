"""``GET /books/{book_id}/archive``: a book's page images (or a page range) streamed as one ZIP or TAR.

Everything that can refuse the request does so before the first byte: no key (401), ``clean`` without entitlement
(403), an unknown book (404), a range outside the book (400), a pool that cannot pay for the first image (429), the
access store down (503). After that the archive always ends cleanly; see ``imagesvc.tools.archive``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter

from imagesvc.bulk.containers import FORMATS, Member, tar_chunks, zip_chunks
from imagesvc.tools.archive import ARCHIVE_SCHEMA, archive_members, plan_archive
from imagesvc.web.app_keys import REQUEST_ID, SERVICES
from imagesvc.web.params import accepts
from imagesvc.web.rest import tool_call

__all__ = ["ArchiveResponse", "archive"]

QUERY = {"properties": {k: v for k, v in ARCHIVE_SCHEMA["properties"].items() if k != "book_id"}}


class ArchiveResponse(web.StreamResponse):
    """A response whose body is the archive's chunks, written in ``write_eof`` (the access middleware sends it);
    the member generator is always closed, so reservations of members not sent are refunded."""

    def __init__(self, members: AsyncIterator[Member], format: str, headers: dict[str, str]) -> None:
        super().__init__(status=200, headers=headers)
        self.content_type = FORMATS[format]
        self._members: Any = members
        self._format = format
        self._head = False

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        self._head = request.method == "HEAD"
        return await super().prepare(request)

    async def write_eof(self, data: bytes = b"") -> None:
        members, self._members = self._members, None
        if members is not None:
            try:
                if not self._head:
                    frame = zip_chunks if self._format == "zip" else tar_chunks
                    async for chunk in frame(members):
                        await self.write(chunk)
            finally:
                await asyncio.shield(members.aclose())
        await super().write_eof(data)


@accepts(QUERY)
async def archive(request: web.Request, arguments: dict[str, Any]) -> web.StreamResponse:
    """A book's page images as one ZIP (ZIP64) or TAR download that unpacks into a BagIt bag: keys only, one
    request, one image unit per page image (metered as /image), resumable by page with from."""
    services = request.app[SERVICES]
    call = tool_call(request)
    plan = await plan_archive(
        services,
        call,
        book_id=request.match_info["book_id"],
        tier=arguments["tier"],
        clean=arguments["clean"],
        format=arguments["format"],
        first=arguments.get("from"),
        last=arguments.get("to"),
    )
    first_paid = None
    if plan.images:
        # The first image is held on the request's own meter: a 429 or 503 comes before any byte, the pool shows in
        # this response's RateLimit headers, and the access middleware refunds it if the body never starts.
        await call.meter.reserve("images", 1)
        first_paid = call.meter
    transport_alive = _alive(request)
    members = archive_members(
        services, call, plan, first_paid, request_id=request.get(REQUEST_ID, "-"), delivered=transport_alive
    )
    headers = {
        "Content-Disposition": f'attachment; filename="{plan.filename}"',
        "Cache-Control": "private, no-store",
        "Vary": "Authorization",
        "X-Archive-Pages": f"{plan.first}-{plan.last}",
        "X-Archive-Images": str(plan.images),
        "X-Catalog-Version": plan.catalog_version,
    }
    return ArchiveResponse(members, plan.format, headers)


def _alive(request: web.Request) -> Any:
    def alive() -> bool:
        transport = request.transport
        return transport is not None and not transport.is_closing()

    return alive
