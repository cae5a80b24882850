"""Fixtures of the storage contract suite: one ``store`` per real backend, each test in a fresh bucket or folder."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from imagesvc.storage import ObjectStore
from imagesvc.storage.local import LocalStore
from imagesvc.storage.s3 import S3Config, S3Store
from tests.servers import S3Server

# A small page size makes the listing test cross pages on S3 with a few hundred keys instead of thousands.
LIST_PAGE_SIZE = 100


def s3_config(server: S3Server, bucket: str | None = None, **overrides: object) -> S3Config:
    """Config for ``server`` with a fresh bucket name unless one is given."""
    values: dict[str, object] = {
        "endpoint_url": server.endpoint_url,
        "bucket": bucket or f"t-{uuid.uuid4().hex[:20]}",
        "region": server.region,
        "access_key": server.access_key,
        "secret_key": server.secret_key,
        "list_page_size": LIST_PAGE_SIZE,
    }
    values.update(overrides)
    return S3Config(**values)  # type: ignore[arg-type]


@pytest.fixture(params=["moto", "ceph"])
def s3_server(request: pytest.FixtureRequest) -> S3Server:
    """Each real S3 server in turn."""
    return request.getfixturevalue("moto_server" if request.param == "moto" else "ceph_rgw")


@pytest.fixture(params=["local", "moto", "ceph"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ObjectStore]:
    """An empty store of each backend."""
    backend: ObjectStore
    if request.param == "local":
        backend = LocalStore(tmp_path / "store")
    else:
        server = request.getfixturevalue("moto_server" if request.param == "moto" else "ceph_rgw")
        backend = S3Store(s3_config(server))
        await backend.ensure_bucket()
    try:
        yield backend
    finally:
        await backend.close()
