"""Archive framing: members in, container bytes out (ZIP64 with ``stream-zip``, or POSIX pax TAR), streamed.

A ``Member`` holds one file's bytes (one member at a time is in memory, two for ZIP, which looks one ahead) and a
``sent`` callback. The generators here call ``sent`` once every byte of that member has been taken by the consumer,
which writes each chunk before asking for the next: the point at which an image counts as delivered.

``stream-zip`` (MIT) rather than ``zipstream-ng`` (LGPL-3.0): both stream ZIP64 in constant memory; ``zipstream-ng``
can also compute a total size ahead, but signed members' sizes are only known once signed, so that buys nothing here.
Members are stored (JPEG does not deflate), with sizes and CRC-32 in the local header. TAR members carry their
SHA-256 as a pax record (``IMAGESVC.sha256``), so a client can verify each file as it arrives.
"""

from __future__ import annotations

import datetime as dt
import stat
import tarfile
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass

from stream_zip import NO_COMPRESSION_64, stream_zip

__all__ = ["FORMATS", "Member", "tar_chunks", "zip_chunks"]

FORMATS = {"zip": "application/zip", "tar": "application/x-tar"}
ZIP_CHUNK = 1 << 16  # output pieces of the ZIP stream: a member counts as sent with the piece its end is in
SHA256_PAX = "IMAGESVC.sha256"


@dataclass
class Member:
    """One file of the archive: its path, bytes, their SHA-256, and what to do once they were handed over."""

    name: str
    data: bytes
    sha256: str
    modified: dt.datetime
    sent: Callable[[], Awaitable[None]] | None = None


async def _sent(member: Member) -> None:
    if member.sent is not None:
        await member.sent()


def _tar_header(member: Member) -> bytes:
    info = tarfile.TarInfo(member.name)
    info.size = len(member.data)
    info.mtime = int(member.modified.timestamp())
    info.mode = 0o644
    info.pax_headers = {SHA256_PAX: member.sha256}
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


async def tar_chunks(members: AsyncIterator[Member]) -> AsyncIterator[bytes]:
    """A pax TAR stream of ``members``; each member's ``sent`` runs once its header, data and padding were taken."""
    async for member in members:
        yield _tar_header(member)
        yield member.data
        pad = -len(member.data) % tarfile.BLOCKSIZE
        if pad:
            yield b"\0" * pad
        await _sent(member)
    yield b"\0" * (2 * tarfile.BLOCKSIZE)  # the end-of-archive marker


async def zip_chunks(members: AsyncIterator[Member]) -> AsyncIterator[bytes]:
    """A ZIP64 stream of ``members`` (stored, not deflated); each member's ``sent`` runs once its bytes were taken.

    ``stream_zip`` is a plain generator that pulls members from an iterator: it is stepped here on the event loop,
    with the next member fetched (awaited) before each step, so that it never finds the queue empty before the end.
    """
    queue: deque[Member] = deque()
    done: list[Member] = []
    source = members.__aiter__()
    exhausted = False
    mode = stat.S_IFREG | 0o644

    def files() -> Iterator[tuple[str, dt.datetime, int, object, tuple[bytes]]]:
        while queue:
            member = queue.popleft()
            yield member.name, member.modified, mode, NO_COMPRESSION_64, (member.data,)
            done.append(member)  # resumed for the next member: this one's bytes are all in the chunk being built

    chunks = iter(stream_zip(files(), chunk_size=ZIP_CHUNK, extended_timestamps=False))  # type: ignore[arg-type]
    while True:
        if not queue and not exhausted:
            try:
                queue.append(await source.__anext__())
            except StopAsyncIteration:
                exhausted = True
        try:
            chunk = next(chunks)
        except StopIteration:
            break
        # ``stream_zip`` asks for the next member while it fills a chunk, so a member it just finished may end in
        # this very chunk (with the next member's header after it): it is delivered only once this chunk was taken.
        finished = done[:]
        done.clear()
        yield chunk
        for member in finished:
            await _sent(member)
    for member in done:  # finished within chunks already taken
        await _sent(member)
