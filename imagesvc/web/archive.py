"""``GET /books/{book_id}/archive``: a book's page images (or a page range) streamed as one ZIP or TAR.

Everything that can refuse the request does so before the first byte: no key (401), ``clean`` without entitlement
(403), an unknown book (404), a range outside the book (400), a caller with its most archives open (429) or a node
with its most (503), a pool that cannot pay for the first image (429), the access store down (503). After that the
archive always ends cleanly; see ``imagesvc.tools.archive``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter

from imagesvc.access import Reservation
from imagesvc.bulk.containers import FORMATS, Member, tar_chunks, zip_chunks
from imagesvc.errors import ImagesvcError, RateLimited, Unauthorized, Unavailable
from imagesvc.tools.archive import ARCHIVE_SCHEMA, Outlet, archive_members, plan_archive
from imagesvc.web.app_keys import ACCESS, CALLER, IDENTIFIER, KEEPER, LEDGER, REQUEST_ID, SERVICES, WIRE
from imagesvc.web.params import accepts
from imagesvc.web.responses import KeptResponse, write_pieces
from imagesvc.web.rest import tool_call
from imagesvc.web.wire import Keeper

__all__ = ["ArchiveResponse", "archive"]

QUERY = {"properties": {k: v for k, v in ARCHIVE_SCHEMA["properties"].items() if k != "book_id"}}


class ArchiveResponse(KeptResponse):
    """A response whose body is the archive's chunks, written in ``write_eof`` (the access middleware sends it under
    its keeper); the member generator is always closed, and the ledger refunds what the client never received."""

    def __init__(self, members: AsyncIterator[Member], format: str, headers: dict[str, str]) -> None:
        super().__init__(status=200, headers=headers)
        self.content_type = FORMATS[format]
        self._members: Any = members
        self._format = format
        self._head = False
        self._keeper: Keeper | None = None

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        self._head = request.method == "HEAD"
        self._keeper = request.get(KEEPER)
        limit_send_buffer(request.transport, request.app[SERVICES].settings.archive_send_buffer)
        return await super().prepare(request)

    async def write_eof(self, data: bytes = b"") -> None:
        members, self._members = self._members, None
        if members is not None:
            try:
                if not self._head:
                    frame = zip_chunks if self._format == "zip" else tar_chunks
                    async for chunk in frame(members):
                        await write_pieces(self, chunk)
                    if self._keeper is not None:
                        # The archive's end is sent once every image in it is settled: a client that has the whole
                        # archive finds it counted, whatever it asks next and on whichever connection.
                        await self._keeper.finish()
            finally:
                await asyncio.shield(members.aclose())
        await super().write_eof(data)


def limit_send_buffer(transport: asyncio.BaseTransport | None, size: int) -> None:
    """Give the connection a send buffer of ``size`` bytes (0: leave it to the kernel), so that a client that stops
    reading holds at most that much of an archive in this machine's kernel, and members are made no further ahead."""
    sock = None if transport is None or not size else transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)


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
    await take_archive_slots(request)
    first_paid = None
    if plan.images:
        # The first image is held on the request's own meter: a 429 or 503 comes before any byte, the pool shows in
        # this response's RateLimit headers, and the access middleware refunds it if the body never starts.
        await call.meter.reserve("images", 1)
        first_paid = call.meter
    members = archive_members(
        services, call, plan, first_paid, request_id=request.get(REQUEST_ID, "-"), outlet=_outlet(request)
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


def _outlet(request: web.Request) -> Outlet:
    """The archive's view of its connection (the middleware sets up the wire and keeper before the first byte)."""
    app = request.app

    async def still_allowed() -> ImagesvcError | None:
        try:
            await app[IDENTIFIER].identify(request.headers, request.remote, request.cookies)
        except Unauthorized as exc:  # revoked or expired since the archive began
            return exc
        except ImagesvcError:  # the catalog cannot say now: ask again at the next check
            return None
        return None

    return Outlet(
        ledger=request[LEDGER],
        position=lambda: request[WIRE].position(),
        handed=lambda: request[KEEPER].poke(),
        still_allowed=still_allowed,
        recheck_seconds=app[SERVICES].settings.archive_key_check,
    )


ARCHIVE_POOL = "archives"  # concurrency slots: reservations that are never committed, refunded when the archive ends
SLOT_RETRY_SECONDS = 10


async def take_archive_slots(request: web.Request) -> None:
    """Hold one of the caller's ``archive_per_key`` slots and one of this node's ``archive_per_node`` for as long as
    the archive is sent (leases renewed and refunded by the request's ledger; a process that dies lets them lapse).
    Raises ``RateLimited`` (429) when the caller has its most archives open, ``Unavailable`` (503) when the node has;
    both with Retry-After. A HEAD takes none but is refused as GET would be."""
    app, caller = request.app, request[CALLER]
    settings, access = app[SERVICES].settings, app[ACCESS]
    node = _node(request)
    wanted = ((caller.subject, settings.archive_per_key), (node, settings.archive_per_node))
    if request.method == "HEAD":
        for subject, limit in wanted:
            if (await access.usage(subject, ARCHIVE_POOL, limit)).remaining == 0:
                raise _busy(subject, limit)
        return
    ledger = request[LEDGER]
    for subject, limit in wanted:
        slot = await access.reserve(subject, ARCHIVE_POOL, 1, limit)
        if not isinstance(slot, Reservation):
            await ledger.close(None)  # the slot taken already goes back
            raise _busy(subject, limit)
        ledger.lease(access, slot)


def _node(request: web.Request) -> str:
    """This node's name for its slots: the host and the port it listens on (its workers share the listening socket;
    two nodes on one host, or on one network namespace, listen on two ports and so keep two counts)."""
    sockname = None if request.transport is None else request.transport.get_extra_info("sockname")
    listening = sockname[1] if isinstance(sockname, tuple) and len(sockname) >= 2 else sockname
    return f"node:{socket.gethostname()}:{listening or ''}"


def _busy(subject: str, limit: int) -> ImagesvcError:
    if not subject.startswith("node:"):
        return RateLimited(
            f"This caller may download {limit} archive{'s' if limit != 1 else ''} at once, and has {limit} in "
            "progress. Another can start when one of them ends.",
            recovery=[
                f"Retry after {SLOT_RETRY_SECONDS} seconds (the Retry-After header), or once a download has ended.",
                "Download archives one after another rather than side by side.",
            ],
            details={"pool": ARCHIVE_POOL, "limit": limit, "retry_after_seconds": SLOT_RETRY_SECONDS},
            headers={"Retry-After": str(SLOT_RETRY_SECONDS)},
        )
    return Unavailable(
        "This server is sending as many archives as it may at once; try again shortly.",
        retry_after=SLOT_RETRY_SECONDS,
        details={"pool": ARCHIVE_POOL},
    )
