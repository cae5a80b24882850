"""An async reader of the archive route's TAR stream that trusts nothing it reads.

Only what the route sends is accepted: POSIX pax members (an ``x`` extended header, then a regular file), each file
at most ``max_member`` bytes and each pax header at most ``MAX_PAX`` bytes, both checked from the header before any
of the body is read. Everything else (sparse files of either GNU form, links, devices, folders, global headers, GNU
long names, a header whose checksum is wrong) ends the archive with ``TarRefused``: nothing of such a member is
read or written. The body is handed over in chunks of at most ``CHUNK`` bytes, so memory stays bounded whatever a
header declares.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

__all__ = ["CHUNK", "MAX_PAX", "Member", "TarReader", "TarRefused"]

BLOCK = 512
CHUNK = 1 << 16
MAX_PAX = 1 << 16  # the route's pax headers hold a path and a digest: a few hundred bytes
REGULAR = (b"0", b"\0")
SPECIAL = {
    b"1": "a hard link",
    b"2": "a symbolic link",
    b"3": "a character device",
    b"4": "a block device",
    b"5": "a folder",
    b"6": "a FIFO",
    b"7": "a contiguous file",
    b"g": "a global pax header",
    b"S": "a GNU sparse file",
    b"L": "a GNU long name",
    b"K": "a GNU long link name",
    b"V": "a volume header",
    b"M": "a multi-volume continuation",
}


class TarRefused(ValueError):
    """The stream holds something the route never sends, or is malformed: the archive is read no further."""


@dataclass
class Member:
    name: str
    size: int
    pax: dict[str, str] = field(default_factory=dict)


def _octal(field_: bytes, what: str) -> int:
    if field_[:1] and field_[0] & 0x80:
        raise TarRefused(f"the archive's {what} is in base-256 form, which the route never sends")
    text = field_.split(b"\0", 1)[0].strip(b" \0")
    try:
        return int(text or b"0", 8)
    except ValueError:
        raise TarRefused(f"the archive's {what} is not a number") from None


def _checksum_ok(block: bytes) -> bool:
    stated = _octal(block[148:156], "header checksum")
    actual = sum(block[:148]) + 8 * 32 + sum(block[156:])
    return stated == actual


def _pax_records(data: bytes) -> dict[str, str]:
    records: dict[str, str] = {}
    position = 0
    while position < len(data):
        space = data.find(b" ", position)
        try:
            length = int(data[position:space])
        except ValueError:
            raise TarRefused("the archive's pax header is malformed") from None
        record = data[space + 1 : position + length]
        if length <= 0 or not record.endswith(b"\n") or b"=" not in record:
            raise TarRefused("the archive's pax header is malformed")
        key, value = record[:-1].split(b"=", 1)
        records[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
        position += length
    return records


class TarReader:
    """``async for member in reader``, then ``reader.body(member)`` (its chunks) before the next member."""

    def __init__(self, read: Callable[[int], Awaitable[bytes]], max_member: int) -> None:
        self.read = read  # reads exactly n bytes, or raises
        self.max_member = max_member
        self._unread = 0

    async def __aiter__(self) -> AsyncIterator[Member]:
        pax: dict[str, str] = {}
        while True:
            if self._unread:
                raise RuntimeError("a member's body was not read before the next member")
            block = await self.read(BLOCK)
            if block == bytes(BLOCK):
                return  # the end-of-archive marker (the second zero block is not needed)
            if not _checksum_ok(block):
                raise TarRefused("an archive header's checksum is wrong: the stream is not the route's TAR")
            kind = block[156:157]
            size = _octal(block[124:136], "member size")
            if kind == b"x":
                if pax:
                    raise TarRefused("the archive has two pax headers for one member")
                if size > MAX_PAX:
                    raise TarRefused(f"the archive's pax header declares {size} bytes (at most {MAX_PAX})")
                raw = await self.read(size + (-size % BLOCK))
                pax = _pax_records(raw[:size])
                if any(k.startswith("GNU.sparse") for k in pax):
                    raise TarRefused("the archive holds a sparse file (GNU.sparse pax records); refused")
                continue
            if kind not in REGULAR:
                what = SPECIAL.get(kind, f"a member of type {kind!r}")
                raise TarRefused(f"the archive holds {what}, which is not a plain file; refused")
            if "size" in pax:
                try:
                    size = int(pax["size"])
                except ValueError:
                    raise TarRefused("the archive's pax size is not a number") from None
            if size < 0 or size > self.max_member:
                raise TarRefused(f"an archive member declares {size} bytes, more than --max-member ({self.max_member})")
            name = pax.get("path")
            if name is None:
                prefix = block[345:500].split(b"\0", 1)[0]
                base = block[0:100].split(b"\0", 1)[0]
                name = ((prefix + b"/" + base) if prefix else base).decode("utf-8", "replace")
            member = Member(name, size, pax)
            pax = {}
            self._unread = size + (-size % BLOCK)
            yield member

    async def body(self, member: Member) -> AsyncIterator[bytes]:
        """The member's bytes in chunks of at most ``CHUNK``; its padding is read and dropped."""
        left = member.size
        while left:
            chunk = await self.read(min(CHUNK, left))
            left -= len(chunk)
            self._unread -= len(chunk)
            yield chunk
        pad = -member.size % BLOCK
        if pad:
            await self.read(pad)
        self._unread = 0
