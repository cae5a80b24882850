"""Admission for search by image: searches wait for their share of the pixel budget, a caller's second search and a
full queue are refused at once, and a picture is priced from its header before any pixel is decoded."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable

import pytest
from PIL import Image

from imagesvc.errors import RateLimited, Unavailable
from imagesvc.tools.image_work import ImageWork, decode_cost


def _encoded(size: tuple[int, int], fmt: str, mode: str = "RGB") -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, size, 255 if mode == "L" else (255, 255, 255)).save(buffer, fmt)
    return buffer.getvalue()


def test_a_picture_is_priced_by_the_pixels_its_decoding_holds() -> None:
    big_png = decode_cost(_encoded((8000, 5000), "PNG", "L")[:65536], 1200, unreadable=1)
    assert big_png == 8000 * 5000 + 4 * 1200 * 1200 * 3  # decoded whole in its mode (L), reduced before RGB
    big_jpeg = decode_cost(_encoded((8000, 5000), "JPEG")[:65536], 1200, unreadable=1)
    assert big_jpeg == 2000 * 1250 * 3 * 2  # decoded at a quarter scale, still at least 1200 px
    assert decode_cost(b"not a picture", 1200, unreadable=7) == 7


def test_a_tiff_whose_directory_is_past_the_head_is_priced_as_unknown_not_as_small() -> None:
    """Pillow writes a TIFF's directory after its strips: a 6000 x 6000 deflated TIFF of 176 KB says nothing of its
    size in its first 48 KB, and decodes to 108 MB."""
    tiff = io.BytesIO()
    Image.new("RGB", (6000, 6000), (200, 100, 50)).save(tiff, "TIFF", compression="tiff_adobe_deflate")
    data = tiff.getvalue()
    assert len(data) < 200_000 and int.from_bytes(data[4:8], "little") > 49_152  # the directory is past the head
    budget = 256 << 20
    assert decode_cost(data[:49_152], 1200, unreadable=budget) == budget  # runs alone, not beside another
    assert decode_cost(data, 1200, unreadable=budget) >= 6000 * 6000 * 3  # read whole, priced by its pixels


async def _until(done: Callable[[], bool]) -> None:
    """Until ``done()``, letting the other tasks run; a bound only a hang reaches."""
    async with asyncio.timeout(30):
        while not done():
            await asyncio.sleep(0.001)


async def test_searches_wait_for_their_share_of_the_pixel_budget() -> None:
    work = ImageWork(per_caller=1, threads=4, queue=4, memory=100)
    order: list[str] = []
    first_in = asyncio.Event()
    release = asyncio.Event()

    async def search(caller: str, cost: int) -> None:
        async with work.admit(caller, cost):
            order.append(caller)
            first_in.set()
            await release.wait()

    first = asyncio.ensure_future(search("a", 80))
    await first_in.wait()
    second = asyncio.ensure_future(search("b", 80))  # does not fit beside the first: waits, is not refused
    await _until(lambda: work.state()["waiting"] == 1)
    assert order == ["a"] and work.state() == {"running": 1, "waiting": 1, "held_bytes": 80}
    with pytest.raises(RateLimited) as refused:  # a's second search while its first runs
        async with work.admit("a", 1):
            pass
    assert int(refused.value.headers["Retry-After"]) > 0
    release.set()
    await asyncio.gather(first, second)
    assert order == ["a", "b"] and work.state() == {"running": 0, "waiting": 0, "held_bytes": 0}


async def test_a_full_queue_refuses_with_retry_after() -> None:
    work = ImageWork(per_caller=5, threads=1, queue=1, memory=1000)
    release = asyncio.Event()
    started = asyncio.Event()

    async def hold(caller: str) -> None:
        async with work.admit(caller, 1):
            started.set()
            await release.wait()

    running = asyncio.ensure_future(hold("a"))
    await started.wait()
    waiting = asyncio.ensure_future(hold("b"))
    await _until(lambda: work.state()["waiting"] == 1)
    with pytest.raises(Unavailable) as full:
        async with work.admit("c", 1):
            pass
    assert full.value.status == 503 and int(full.value.headers["Retry-After"]) > 0
    release.set()
    await asyncio.gather(running, waiting)
