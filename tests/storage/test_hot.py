"""The in-memory cache of public tiers: repeat reads skip the store, nothing mutable is kept, the bound holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagesvc.storage import ObjectNotFound
from imagesvc.storage.hot import HotObjects
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
    for name in "abcdefghij":
        await store.put(f"pub/t/{name}.jpg", name.encode() * 900, content_type="image/jpeg")
    await store.put("pub/t/big.jpg", b"B" * 1_001, content_type="image/jpeg")
    for name in "abcdefgh":
        await hot.get(f"pub/t/{name}.jpg")
    await hot.get("pub/t/a.jpg")  # a is now the most recently used
    await hot.get("pub/t/i.jpg")  # 9 × 900 bytes > 8,000: the least recently used (b) goes
    assert hot.bytes <= 8_000 and len(hot) == 8
    misses = hot.misses
    await hot.get("pub/t/a.jpg")
    assert hot.misses == misses  # kept
    await hot.get("pub/t/b.jpg")
    assert hot.misses == misses + 1  # evicted, read again
    await hot.get("pub/t/big.jpg")
    await hot.get("pub/t/big.jpg")
    assert hot.misses == misses + 3  # too big to keep: always read from the store
    assert hot.bytes <= 8_000


async def test_a_zero_bound_keeps_nothing(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    await store.put("pub/z/1.jpg", b"z", content_type="image/jpeg")
    hot = HotObjects(store, 0)
    await hot.get("pub/z/1.jpg")
    await hot.get("pub/z/1.jpg")
    assert len(hot) == 0 and hot.hits == 0
