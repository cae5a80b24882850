"""Archive framing: an image counts as delivered (and is charged) only once every byte of it was taken by the
client, whichever chunk its last bytes travel in; a client that hangs up earlier pays for nothing it lacks."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import random
import tarfile
import zipfile
from collections.abc import AsyncIterator

import pytest

from imagesvc.bulk.containers import ZIP_CHUNK, Member, tar_chunks, zip_chunks

FRAMES = {"zip": zip_chunks, "tar": tar_chunks}


def _images() -> list[bytes]:
    """Four images of different sizes around the ZIP chunk size, so that members end inside chunks."""
    rng = random.Random(7)
    return [rng.randbytes(size) for size in (ZIP_CHUNK + ZIP_CHUNK // 2, 300_000, 2 * ZIP_CHUNK + 5, 70_000)]


async def _members(images: list[bytes], charged: list[int]) -> AsyncIterator[Member]:
    for n, data in enumerate(images):

        async def sent(n: int = n) -> None:
            charged.append(n)

        yield Member(
            f"bag/data/{n:04d}.jpg", data, hashlib.sha256(data).hexdigest(), dt.datetime(2026, 1, 2, 3, 4, 6), sent
        )


def _names(frame: str, whole: bytes) -> list[str]:
    if frame == "zip":
        with zipfile.ZipFile(io.BytesIO(whole)) as archive:
            return archive.namelist()
    with tarfile.open(fileobj=io.BytesIO(whole)) as archive:
        return archive.getnames()


def _ends(frame: str, whole: bytes, images: list[bytes]) -> list[int]:
    """Where each member ends in the whole archive: after its data (and, in TAR, the padding that closes it)."""
    ends = []
    for data in images:
        end = whole.find(data) + len(data)
        ends.append(end + (-len(data) % tarfile.BLOCKSIZE if frame == "tar" else 0))
    return ends


async def _take(frame: str, images: list[bytes], chunks_taken: int) -> tuple[bytes, list[int], int]:
    """A client that writes out ``chunks_taken`` chunks and hangs up while the next one is being written."""
    charged: list[int] = []
    stream = FRAMES[frame](_members(images, charged))
    received = b""
    total = 0
    try:
        async for chunk in stream:
            total += 1
            if total > chunks_taken:
                break  # this chunk's write failed: the client is gone
            received += chunk
    finally:
        await stream.aclose()
    return received, charged, total


@pytest.mark.parametrize("frame", ["zip", "tar"])
async def test_a_client_is_charged_for_exactly_the_images_it_received_in_full(frame: str) -> None:
    images = _images()
    whole, charged, chunks = await _take(frame, images, chunks_taken=10**6)
    assert charged == [0, 1, 2, 3]  # the whole archive: every image once
    assert len(_names(frame, whole)) == 4  # a valid archive of all four
    ends = _ends(frame, whole, images)
    for cut in range(chunks):  # hang up while each chunk is being written, in turn
        received, charged, _ = await _take(frame, images, chunks_taken=cut)
        assert whole.startswith(received)
        in_full = [n for n, end in enumerate(ends) if end <= len(received)]
        assert charged == in_full, f"hung up while chunk {cut} was written, after {len(received)} bytes"
