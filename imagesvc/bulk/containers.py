"""Archive framing: members in, container bytes out (ZIP64 with ``stream-zip``, or POSIX pax TAR), streamed.

A ``Member`` holds one file's bytes (one member at a time is in memory; ZIP fetches the next as the current one
ends) and a ``sent`` callback. The generators here call ``sent`` once every byte of that member has been taken by the
consumer, which writes each chunk before asking for the next: the point from which the door waits for the client to
acknowledge the member.

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
    and the next member is fetched (awaited) before the step that could ask for it: once the output since the
    current member was taken is within two chunks of its size (one step makes one chunk). So the next member is made
    only as the current one ends, and an archive whose client stopped reading holds the one member it is sending.
    """
    queue: deque[Member] = deque()
    done: list[Member] = []
    source = members.__aiter__()
    exhausted = False
    current: list[int] = []  # the size of the member being framed, once it is taken
    emitted = 0  # output since it was taken, counting the whole chunk it was taken in (so never too little)
    mode = stat.S_IFREG | 0o644

    def files() -> Iterator[tuple[str, dt.datetime, int, object, tuple[bytes]]]:
        while queue or not exhausted:
            if not queue:  # a member asked for before it was fetched would end the archive early: never silently
                raise RuntimeError("the ZIP framing ran ahead of the archive's members")
            member = queue.popleft()
            current[:] = [len(member.data)]
            yield member.name, member.modified, mode, NO_COMPRESSION_64, (member.data,)
            # Resumed for the next member: this one's bytes are all in the chunk being built, so they need not be
            # held while that chunk waits for a client that may not read it.
            member.data = b""
            done.append(member)

    chunks = iter(stream_zip(files(), chunk_size=ZIP_CHUNK, extended_timestamps=False))  # type: ignore[arg-type]
    while True:
        near_end = not current or current[0] - emitted <= 2 * ZIP_CHUNK
        if not queue and not exhausted and near_end:
            try:
                queue.append(await source.__anext__())
            except StopAsyncIteration:
                exhausted = True
        taken = len(queue)
        try:
            chunk = next(chunks)
        except StopIteration:
            break
        emitted = len(chunk) if len(queue) < taken else emitted + len(chunk)
        # ``stream_zip`` asks for the next member while it fills a chunk, so a member it just finished may end in
        # this very chunk (with the next member's header after it): it is delivered only once this chunk was taken.
        finished = done[:]
        done.clear()
        yield chunk
        for member in finished:
            await _sent(member)
        finished.clear()
    for member in done:  # finished within chunks already taken
        await _sent(member)
