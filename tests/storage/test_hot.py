"""The in-memory cache of public tiers: repeat reads skip the store, nothing mutable is kept, the bound holds."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from imagesvc.ingest.objects import public_key
from imagesvc.storage import ObjectNotFound, StoredObject
from imagesvc.storage.hot import HotObjects, is_immutable
from imagesvc.storage.local import LocalStore


async def test_a_public_tier_is_read_from_the_store_once(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    key = "pub/b1/2-display-0123abcd.jpg"
    await store.put(key, b"marked jpeg", content_type="image/jpeg")
    hot = HotObjects(store, 1 << 20)
    first = await hot.get(key)
    store.path_for(key).unlink()  # gone from disk: a second read can only come from memory
    second = await hot.get(key)
    assert first.data == second.data == b"marked jpeg"
    assert second.info.etag == first.info.etag
    assert (hot.hits, hot.misses, hot.bytes) == (1, 1, len(b"marked jpeg"))


def test_only_keys_named_by_their_content_hash_count_as_immutable() -> None:
    sha = hashlib.sha256(b"tier bytes").hexdigest()
    assert is_immutable(public_key("0123abcd0123abcd", 7, "display", sha))
    assert is_immutable(public_key("0123abcd0123abcd", 7, "thumb", sha, "0123abcd0123abcd-7:1"))
    for key in ("pub/snapshots/LATEST", "pub/b1/cover.jpg", "clean/b1/7/display.jpg", "pub/b1/7-display-0123.jpg"):
        assert not is_immutable(key), key


class SlowReads(LocalStore):
    """A local store whose reads hand their bytes back only once ``release`` is set: a read that is slow to arrive."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.read, self.release = asyncio.Event(), asyncio.Event()

    async def get(self, key: str, *, byte_range: tuple[int, int] | None = None) -> StoredObject:
        stored = await super().get(key, byte_range=byte_range)
        self.read.set()
        await self.release.wait()
        return stored


async def test_a_read_that_overlaps_a_delete_is_not_kept(tmp_path: Path) -> None:
    store = SlowReads(tmp_path)
    key = "pub/d/1-thumb-0badf00d.jpg"
    await store.put(key, b"old", content_type="image/jpeg")
    hot = HotObjects(store, 1 << 20)
    reading = asyncio.create_task(hot.get(key))
    await store.read.wait()  # the read has its bytes and waits to hand them back
    await hot.delete(key)
    store.release.set()
    assert (await reading).data == b"old"  # that reader gets what it read
    assert len(hot) == 0  # but the bytes are not kept for the next one
    with pytest.raises(ObjectNotFound):
        await hot.get(key)


async def test_objects_outside_the_public_prefix_are_always_read_fresh(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    hot = HotObjects(store, 1 << 20)
    await store.put("clean/b1/2-display.jpg", b"v1", content_type="image/jpeg")
    assert (await hot.get("clean/b1/2-display.jpg")).data == b"v1"
    await store.put("clean/b1/2-display.jpg", b"v2", content_type="image/jpeg")  # clean keys are rewritten in place
    assert (await hot.get("clean/b1/2-display.jpg")).data == b"v2"
    assert len(hot) == 0 and hot.bytes == 0


async def test_ranges_pass_through_and_deletes_are_not_served_from_memory(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    hot = HotObjects(store, 1 << 20)
    await hot.put("pub/x/1-thumb-00000000.jpg", b"0123456789", content_type="image/jpeg")
    assert (await hot.get("pub/x/1-thumb-00000000.jpg")).data == b"0123456789"
    assert (await hot.get("pub/x/1-thumb-00000000.jpg", byte_range=(2, 4))).data == b"234"
    await hot.delete("pub/x/1-thumb-00000000.jpg")
    with pytest.raises(ObjectNotFound):
        await hot.get("pub/x/1-thumb-00000000.jpg")
    assert hot.bytes == 0


async def test_the_bound_holds_and_the_least_recently_used_go_first(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    hot = HotObjects(store, 8_000)  # one object may take at most 1,000 bytes

    def key(name: str) -> str:
        return f"pub/t/{name}-display-{ord(name):08x}.jpg"

    for name in "abcdefghij":
        await store.put(key(name), name.encode() * 900, content_type="image/jpeg")
    await store.put("pub/t/1-full-0000beef.jpg", b"B" * 1_001, content_type="image/jpeg")
    for name in "abcdefgh":
        await hot.get(key(name))
    await hot.get(key("a"))  # a is now the most recently used
    await hot.get(key("i"))  # 9 × 900 bytes > 8,000: the least recently used (b) goes
    assert hot.bytes <= 8_000 and len(hot) == 8
    misses = hot.misses
    await hot.get(key("a"))
    assert hot.misses == misses  # kept
    await hot.get(key("b"))
    assert hot.misses == misses + 1  # evicted, read again
    await hot.get("pub/t/1-full-0000beef.jpg")
    await hot.get("pub/t/1-full-0000beef.jpg")
    assert hot.misses == misses + 3  # too big to keep: always read from the store
    assert hot.bytes <= 8_000


async def test_a_zero_bound_keeps_nothing(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    await store.put("pub/z/1-thumb-0000000a.jpg", b"z", content_type="image/jpeg")
    hot = HotObjects(store, 0)
    await hot.get("pub/z/1-thumb-0000000a.jpg")
    await hot.get("pub/z/1-thumb-0000000a.jpg")
    assert len(hot) == 0 and hot.hits == 0
