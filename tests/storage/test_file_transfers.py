"""Whole-file transfers (``storage.FileTransfers``), run against every real backend: a file goes up and comes back
byte-exact without passing through memory whole (above the S3 threshold, in parts), a wrapper store reaches its
backend's transfers, and a failed download leaves no file behind."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from imagesvc.storage import ObjectNotFound, ObjectStore, file_transfers
from imagesvc.storage.hot import HotObjects
from imagesvc.storage.s3 import S3Store


async def test_a_file_goes_up_and_comes_back_byte_exact(store: ObjectStore, tmp_path: Path) -> None:
    data = os.urandom(17 * 1024 * 1024 + 3)  # above the 8 MiB threshold: three parts on S3
    source = tmp_path / "index.npz"
    source.write_bytes(data)
    transfers = file_transfers(HotObjects(store, 0))  # through a wrapper, as a serving node's store is
    put = await transfers.put_file("indexes/text/files/abc", source)
    assert put.size == len(data)
    head = await store.head("indexes/text/files/abc")
    assert head is not None and head.size == len(data) and head.etag == put.etag
    if isinstance(store, S3Store):
        assert put.etag.endswith("-3"), "expected a three-part multipart upload read from the file"

    target = tmp_path / "copy.npz"
    assert await transfers.get_file("indexes/text/files/abc", target) == (len(data), hashlib.sha256(data).hexdigest())
    assert target.read_bytes() == data


async def test_a_missing_object_leaves_no_file(store: ObjectStore, tmp_path: Path) -> None:
    target = tmp_path / "never.npz"
    with pytest.raises(ObjectNotFound):
        await file_transfers(store).get_file("indexes/text/files/missing", target)
    assert not target.exists()
