"""The IIIF derivative cache keeps its bound without making a request wait for the sweep."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from imagesvc.iiif.cache import CACHE_PREFIX, DerivativeCache
from imagesvc.storage import ObjectInfo
from imagesvc.storage.local import LocalStore


class GatedListing(LocalStore):
    """A local store whose listings start only once ``release`` is set (a slow or paid listing on S3)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.listing, self.release = asyncio.Event(), asyncio.Event()

    async def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:  # type: ignore[override]
        self.listing.set()
        await self.release.wait()
        async for info in super().list(prefix):
            yield info


async def test_the_write_that_crosses_the_mark_does_not_wait_for_the_sweep(tmp_path: Path) -> None:
    store = GatedListing(tmp_path)
    cache = DerivativeCache(store, max_bytes=8_000)
    for n in range(12):  # 12 kB into an 8 kB cache; each put returns while the sweep it started waits on its listing
        await asyncio.wait_for(cache.put(f"{n}.jpg", bytes(1_000), "image/jpeg"), 5)
    assert store.listing.is_set()  # a sweep did start
    assert len([info async for info in LocalStore(tmp_path).list(CACHE_PREFIX)]) == 12  # and has not run yet
    store.release.set()
    await cache.settled()
    await cache.put("last.jpg", bytes(1_000), "image/jpeg")  # 1 kB more: the next eighth starts another sweep
    await cache.settled()
    kept = sum([info.size async for info in LocalStore(tmp_path).list(CACHE_PREFIX)])
    assert kept <= 8_000


async def test_a_sweep_that_fails_is_logged_and_the_next_write_tries_again(tmp_path: Path) -> None:
    class Down(LocalStore):
        fail = True

        async def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:  # type: ignore[override]
            if self.fail:
                raise OSError("store down")
            async for info in super().list(prefix):
                yield info

    store = Down(tmp_path)
    cache = DerivativeCache(store, max_bytes=4_000)
    for n in range(6):
        await cache.put(f"{n}.jpg", bytes(1_000), "image/jpeg")
        await cache.settled()  # a failed sweep raises nothing into the writer or the loop
    store.fail = False
    await cache.put("again.jpg", bytes(1_000), "image/jpeg")
    await cache.settled()
    assert sum([info.size async for info in LocalStore(tmp_path).list(CACHE_PREFIX)]) <= 4_000
