"""``BytesResponse``: a whole body held in memory, sent after its headers without being copied."""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter

__all__ = ["BytesResponse"]


class BytesResponse(web.StreamResponse):
    """Like ``web.Response(body=...)`` for large bodies such as images, minus one copy of the body per response.

    aiohttp's ``Response`` hands headers and body to the transport together, and on Python 3.11 the transport joins
    them into one new buffer first: for a half-megabyte image that copy was a tenth of what /image cost. Here the
    headers go out on their own and the body follows as a view of the same bytes, under the transport's flow control.
    Sent by ``prepare`` plus ``write_eof``, as aiohttp sends any response a handler returns; HEAD, 204 and 304 get
    the headers only.
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
            await self.write(b"")  # an empty write sends the buffered headers alone
            await self.write(memoryview(body))
        await super().write_eof(data)
