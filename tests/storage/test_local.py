"""What only the local backend promises: files a web server can send, and no stray temp or sidecar files."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from imagesvc.storage import InvalidKey, ObjectExists
from imagesvc.storage.local import LocalStore


async def test_path_for_names_the_file_holding_the_bytes(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    await store.put("pub/b1/p1-display-0123abcd.jpg", b"jpeg bytes", content_type="image/jpeg")
    path = store.path_for("pub/b1/p1-display-0123abcd.jpg")
    assert path == tmp_path.resolve() / "pub" / "b1" / "p1-display-0123abcd.jpg"
    assert path.read_bytes() == b"jpeg bytes"
    with pytest.raises(InvalidKey):
        store.path_for("../etc/passwd")


async def test_no_temp_files_remain_and_listing_shows_only_objects(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    await store.put("a/x.jpg", b"1", content_type="image/jpeg")
    await store.put("a/x.jpg", b"22", content_type="image/jpeg")
    await store.put("a/y.jpg", b"3", if_none_match=True)
    with pytest.raises(ObjectExists):
        await store.put("a/y.jpg", b"4", if_none_match=True)
    on_disk = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert on_disk == [".x.jpg.meta", ".y.jpg.meta", "x.jpg", "y.jpg"]
    assert [info.key async for info in store.list()] == ["a/x.jpg", "a/y.jpg"]


async def test_a_stale_sidecar_never_gives_a_wrong_etag(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    await store.put("k.bin", b"old", content_type="image/png")
    # Simulate a crash between replacing the data and writing its sidecar: new bytes, old sidecar.
    path = store.path_for("k.bin")
    tmp = path.with_name("replacement")
    tmp.write_bytes(b"new content")
    os.replace(tmp, path)
    head = await store.head("k.bin")
    assert head is not None
    assert (head.size, head.etag) == (11, hashlib.md5(b"new content").hexdigest())
    assert (await store.get("k.bin")).info.etag == head.etag


async def test_a_key_cannot_be_both_an_object_and_a_prefix(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    await store.put("a/b", b"file")
    with pytest.raises(InvalidKey, match="parent"):
        await store.put("a/b/c", b"under a file")
    await store.put("x/y/z", b"deep")
    with pytest.raises(InvalidKey, match="prefix"):
        await store.put("x/y", b"over a folder")
    assert (await store.get("a/b")).data == b"file"
    assert await store.head("x/y") is None


async def test_sweep_removes_only_stale_temp_files(tmp_path: Path) -> None:
    """A writer killed mid-write leaves a temp file; ingest sweeps old ones and never touches a fresh one."""
    store = LocalStore(tmp_path)
    await store.put("pub/b/1-thumb-00000000.jpg", b"object")
    stale = tmp_path / "pub" / "b" / ".tmp-deadbeefdeadbeef"
    fresh = tmp_path / "pub" / "b" / ".tmp-0123456789abcdef"
    stale.write_bytes(b"half")
    fresh.write_bytes(b"being written")
    os.utime(stale, (1_000_000_000, 1_000_000_000))
    assert await store.sweep_temp(older_than=600) == 1
    assert not stale.exists() and fresh.exists()
    assert (await store.get("pub/b/1-thumb-00000000.jpg")).data == b"object"
