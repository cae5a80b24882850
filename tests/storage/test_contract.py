"""The ObjectStore contract, run against every real backend: a local folder, moto's S3 server and Ceph RGW."""

from __future__ import annotations

import asyncio
import hashlib
import os
from dataclasses import replace
from pathlib import Path

import pytest

from imagesvc.errors import InvalidRequest
from imagesvc.storage import (
    InvalidKey,
    ObjectExists,
    ObjectNotFound,
    ObjectStore,
    StoreUnavailable,
)
from imagesvc.storage.local import LocalStore
from imagesvc.storage.s3 import S3Store
from tests.servers import S3Server, refused_port
from tests.storage.conftest import LIST_PAGE_SIZE, s3_config

BINARY = bytes(range(256)) * 40 + b"\x00\r\n\xff"  # every byte value, NULs and line ends: no text-mode mangling


async def keys_of(store: ObjectStore, prefix: str = "") -> list[str]:
    return [info.key async for info in store.list(prefix)]


async def test_put_get_head_delete_round_trip(store: ObjectStore) -> None:
    put = await store.put("masters/b1/p1.tif", BINARY, content_type="image/tiff")
    assert (put.key, put.size, put.content_type) == ("masters/b1/p1.tif", len(BINARY), "image/tiff")

    got = await store.get("masters/b1/p1.tif")
    assert got.data == BINARY
    assert got.info.etag == put.etag and got.info.content_type == "image/tiff"
    assert await store.head("masters/b1/p1.tif") == put

    await store.delete("masters/b1/p1.tif")
    assert await store.head("masters/b1/p1.tif") is None
    with pytest.raises(ObjectNotFound):
        await store.get("masters/b1/p1.tif")


async def test_large_object_is_stored_byte_exact(store: ObjectStore) -> None:
    data = os.urandom(17 * 1024 * 1024)  # above the 8 MiB threshold: S3 uploads it in three parts
    put = await store.put("masters/big.tif", data)
    got = await store.get("masters/big.tif")
    assert got.data == data
    assert got.info.size == len(data) == put.size
    head = await store.head("masters/big.tif")
    assert head is not None and head.etag == put.etag != ""
    if isinstance(store, S3Store):
        assert put.etag.endswith("-3"), "expected a three-part multipart upload"


async def test_ranged_get_returns_the_slice_and_the_full_size(store: ObjectStore) -> None:
    await store.put("clean/b/p/full.jpg", BINARY)
    part = await store.get("clean/b/p/full.jpg", byte_range=(10, 19))
    assert part.data == BINARY[10:20]
    assert part.info.size == len(BINARY)

    tail = await store.get("clean/b/p/full.jpg", byte_range=(len(BINARY) - 5, len(BINARY) + 1000))
    assert tail.data == BINARY[-5:], "an end past the object is clamped, as in HTTP"

    with pytest.raises(InvalidRequest):
        await store.get("clean/b/p/full.jpg", byte_range=(len(BINARY), len(BINARY) + 10))
    with pytest.raises(InvalidRequest):
        await store.get("clean/b/p/full.jpg", byte_range=(20, 10))
    with pytest.raises(ObjectNotFound):
        await store.get("clean/b/p/missing.jpg", byte_range=(0, 10))


async def test_conditional_put_refuses_a_taken_key_and_keeps_the_first(store: ObjectStore) -> None:
    first = await store.put("pub/b/p-thumb-aaaa.jpg", b"first", if_none_match=True)
    with pytest.raises(ObjectExists) as caught:
        await store.put("pub/b/p-thumb-aaaa.jpg", b"second", if_none_match=True)
    assert caught.value.status == 409
    got = await store.get("pub/b/p-thumb-aaaa.jpg")
    assert got.data == b"first" and got.info.etag == first.etag


async def test_conditional_put_of_a_large_object_refuses_a_taken_key(store: ObjectStore) -> None:
    data = os.urandom(9 * 1024 * 1024)
    await store.put("masters/b/p.tif", data, if_none_match=True)
    with pytest.raises(ObjectExists):
        await store.put("masters/b/p.tif", os.urandom(9 * 1024 * 1024), if_none_match=True)
    assert (await store.get("masters/b/p.tif")).data == data


async def test_concurrent_conditional_puts_have_exactly_one_winner(store: ObjectStore) -> None:
    bodies = [f"writer {i}".encode() * 100 for i in range(8)]
    results = await asyncio.gather(
        *(store.put("pub/race.jpg", body, if_none_match=True) for body in bodies), return_exceptions=True
    )
    winners = [i for i, result in enumerate(results) if not isinstance(result, BaseException)]
    losers = [result for result in results if isinstance(result, BaseException)]
    assert len(winners) == 1, results
    assert all(isinstance(result, ObjectExists) for result in losers), losers
    assert (await store.get("pub/race.jpg")).data == bodies[winners[0]]


async def test_unconditional_put_replaces(store: ObjectStore) -> None:
    await store.put("clean/b/p/display.jpg", b"old", content_type="image/jpeg")
    await store.put("clean/b/p/display.jpg", b"newer", content_type="image/png")
    got = await store.get("clean/b/p/display.jpg")
    assert (got.data, got.info.size, got.info.content_type) == (b"newer", 5, "image/png")


async def test_readers_during_overwrites_see_a_whole_object_and_its_own_etag(store: ObjectStore) -> None:
    bodies = [os.urandom(256 * 1024), os.urandom(300 * 1024)]
    await store.put("clean/b/p/thumb.jpg", bodies[0])

    async def write() -> None:
        for round_ in range(12):
            await store.put("clean/b/p/thumb.jpg", bodies[round_ % 2])

    async def read() -> list[tuple[bytes, str]]:
        seen = []
        for _ in range(12):
            got = await store.get("clean/b/p/thumb.jpg")
            seen.append((got.data, got.info.etag))
        return seen

    _, *reads = await asyncio.gather(write(), read(), read())
    for data, etag in (pair for seen in reads for pair in seen):
        assert data in bodies, "a reader saw a partly written object"
        assert etag == hashlib.md5(data).hexdigest(), "the ETag does not describe the bytes returned with it"


async def test_list_filters_by_prefix_in_key_order(store: ObjectStore) -> None:
    # "-" sorts before "/" which sorts before "0": a naive directory walk would get this order wrong.
    keys = ["p/a0", "p/a/b", "p/a-c", "p/b", "q/x", "p/a/c/d"]
    for key in keys:
        await store.put(key, key.encode())
    assert await keys_of(store, "p/") == sorted(k for k in keys if k.startswith("p/"))
    assert await keys_of(store, "p/a") == ["p/a-c", "p/a/b", "p/a/c/d", "p/a0"]
    assert await keys_of(store) == sorted(keys)
    assert await keys_of(store, "nothing/") == []
    listed = {info.key: info async for info in store.list("q/")}
    assert listed["q/x"].size == 3 and listed["q/x"].etag == hashlib.md5(b"q/x").hexdigest()


async def test_list_returns_every_key_across_pages(store: ObjectStore) -> None:
    count = LIST_PAGE_SIZE * 2 + 37
    keys = [f"pub/illus/{i:05d}-thumb.jpg" for i in range(count)]
    limit = asyncio.Semaphore(16)

    async def put(key: str) -> None:
        async with limit:
            await store.put(key, b"x")

    await asyncio.gather(*(put(key) for key in keys))
    await store.put("pub/other.jpg", b"y")
    assert await keys_of(store, "pub/illus/") == keys


async def test_missing_keys_and_idempotent_delete(store: ObjectStore) -> None:
    assert await store.head("masters/none.tif") is None
    with pytest.raises(ObjectNotFound) as caught:
        await store.get("masters/none.tif")
    assert caught.value.status == 404 and caught.value.key == "masters/none.tif"
    await store.delete("masters/none.tif")
    await store.put("masters/once.tif", b"1")
    await store.delete("masters/once.tif")
    await store.delete("masters/once.tif")
    assert await keys_of(store, "masters/") == []


async def test_etag_is_the_md5_stable_and_follows_content(store: ObjectStore) -> None:
    first = await store.put("k/etag.bin", b"alpha")
    assert first.etag == hashlib.md5(b"alpha").hexdigest()
    again = await store.put("k/etag.bin", b"alpha")
    assert again.etag == first.etag
    head = await store.head("k/etag.bin")
    assert head is not None and head.etag == first.etag
    changed = await store.put("k/etag.bin", b"beta")
    assert changed.etag != first.etag
    assert (await store.get("k/etag.bin")).info.etag == changed.etag


async def test_invalid_keys_are_refused_alike(store: ObjectStore) -> None:
    for key in ["", "/abs", "a//b", "a/", "../up", "a/../b", "a/./b", ".hidden", "a/.meta", "a\nb", "x" * 1025]:
        with pytest.raises(InvalidKey) as caught:
            await store.put(key, b"x")
        assert caught.value.status == 400
        with pytest.raises(InvalidKey):
            await store.get(key)
        with pytest.raises(InvalidKey):
            await store.head(key)
    assert await keys_of(store) == []


async def test_ping_tells_a_live_store_from_a_dead_one(store: ObjectStore, tmp_path: Path) -> None:
    with refused_port() as port:
        await store.ping()  # raises StoreUnavailable when the store does not answer, as the next lines show
        if isinstance(store, S3Store):
            dead: ObjectStore = S3Store(replace(store.config, endpoint_url=f"http://127.0.0.1:{port}"))
        else:
            (tmp_path / "not-a-folder").write_text("a file where the store's folder should be")
            dead = LocalStore(tmp_path / "not-a-folder")
        try:
            with pytest.raises(StoreUnavailable):
                await dead.ping()
        finally:
            await dead.close()


async def test_wrong_secret_is_unavailable_not_a_raw_error(s3_server: S3Server) -> None:
    if not s3_server.checks_signatures:
        pytest.skip(f"{s3_server.name} accepts any signature, so a wrong secret cannot be detected there")
    good = S3Store(s3_config(s3_server))
    bad = S3Store(s3_config(s3_server, bucket=good.config.bucket, secret_key="wrong" + s3_server.secret_key))
    try:
        await good.ensure_bucket()
        await good.put("k", b"v")
        for attempt in (lambda: bad.put("k2", b"v"), lambda: bad.get("k"), lambda: bad.head("k"), bad.ping):
            with pytest.raises(StoreUnavailable) as caught:
                await attempt()
            # The operator's detail names the endpoint; the message a caller sees names only the object store.
            assert "refused our credentials" in caught.value.detail and s3_server.endpoint_url in caught.value.detail
            assert s3_server.endpoint_url not in caught.value.message and "object store" in caught.value.message
    finally:
        await good.close()
        await bad.close()


async def test_server_down_is_unavailable_within_seconds(s3_server: S3Server) -> None:
    with refused_port() as port:
        endpoint = f"http://127.0.0.1:{port}"  # nothing listens there
        store = S3Store(s3_config(s3_server, endpoint_url=endpoint))
        try:
            # A generous guard, not a timing assertion: without bounded connect retries botocore keeps trying for
            # minutes.
            async with asyncio.timeout(60):
                with pytest.raises(StoreUnavailable) as caught:
                    await store.put("k", b"v")
        finally:
            await store.close()
        assert "cannot connect" in caught.value.detail and endpoint in caught.value.detail
        assert endpoint not in caught.value.message and caught.value.status == 503


async def test_missing_bucket_is_unavailable_with_a_hint(s3_server: S3Server) -> None:
    store = S3Store(s3_config(s3_server, bucket="no-such-bucket-" + os.urandom(4).hex()))
    try:
        for attempt in (lambda: store.put("k", b"v"), store.ping):
            with pytest.raises(StoreUnavailable) as caught:
                await attempt()
            assert "bucket does not exist" in caught.value.detail
    finally:
        await store.close()
