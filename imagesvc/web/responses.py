"""Responses the routes share: ``BytesResponse`` (a body held in memory, written after its headers rather than joined
with them), ``PublicFile`` (a file from disk, sent once and closed even when the request is cancelled) and
``KeptResponse`` (a body whose sending the access middleware watches even when nothing is reserved yet)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter

__all__ = ["PIECE", "BytesResponse", "KeptResponse", "PublicFile", "write_pieces"]

PIECE = 1 << 16  # bytes handed to the transport at a time: what it copies of a body a slow reader has not taken


async def write_pieces(response: web.StreamResponse, data: bytes | memoryview) -> None:
    """Write ``data`` a ``PIECE`` at a time (``write`` waits for the transport to drain every 64 KiB): the rest of
    the body stays where it is rather than being copied into the transport's buffer for a reader that may never take
    it."""
    view = memoryview(data)
    for start in range(0, len(view), PIECE):
        await response.write(view[start : start + PIECE])


class KeptResponse(web.StreamResponse):
    """A response the access middleware sends under a ``web.wire.Keeper`` whatever it holds: it reserves as it goes
    (an archive), so its write deadline and renewals must run from the first byte."""


class BytesResponse(web.StreamResponse):
    """Like ``web.Response(body=...)`` for large bodies such as images, minus one copy of the body per response.

    aiohttp's ``Response`` holds its headers back to hand them to the transport together with the body, and on
    Python 3.11 the transport joins the two into one new buffer first: for a half-megabyte image that copy was a
    tenth of what /image cost. A ``StreamResponse`` sends its headers when prepared, so here the body follows on its
    own, as a view of the same bytes, under the transport's flow control. Sent by ``prepare`` plus ``write_eof``, as
    aiohttp sends any response a handler returns; HEAD, 204 and 304 get the headers only.
    """

    def __init__(
        self, body: bytes, *, status: int = 200, headers: Mapping[str, str] | None = None, content_type: str
    ) -> None:
        super().__init__(status=status, headers=headers)
        self.content_type = content_type
        self.content_length = len(body)
        self._pending: bytes | None = body

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        if request.method == "HEAD" or self.status in (204, 304):
            self._pending = None
        return await super().prepare(request)

    async def write_eof(self, data: bytes = b"") -> None:
        body, self._pending = self._pending, None
        if body:
            await write_pieces(self, body)
        await super().write_eof(data)


class PublicFile(web.FileResponse):
    """A file response that, once sent, is not sent again: ``web.FileResponse.prepare`` starts over on every call,
    and the response is sent by ``observe_middleware`` before aiohttp itself prepares it a second time."""

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        if self.prepared:
            return None
        # aiohttp opens the file in a thread and closes it when sending ends; a cancellation in between (the server
        # shutting down under a browser's image requests) would drop the open file unclosed. Shielded, the send
        # runs to its end, ordinary or not, and closes it.
        sending = asyncio.ensure_future(super().prepare(request))
        try:
            return await asyncio.shield(sending)
        except asyncio.CancelledError:
            sending.add_done_callback(_ignore_outcome)
            raise


def _ignore_outcome(task: asyncio.Future[object]) -> None:
    """Retrieve a finished background send's outcome: a client that went away is nothing to report."""
    if not task.cancelled():
        task.exception()
