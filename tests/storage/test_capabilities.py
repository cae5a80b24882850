"""What the app's store stack (hot objects in front of metered calls in front of a backend) offers its callers: the
``ObjectStore`` protocol, plus the local backend's files only where they exist, found through a declared protocol."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagesvc.observability import MeteredStore, Metrics
from imagesvc.storage import ObjectNotFound, ObjectStore, local_files
from imagesvc.storage.hot import HotObjects
from imagesvc.storage.local import LocalStore
from imagesvc.storage.s3 import S3Store
from tests.servers import S3Server
from tests.storage.conftest import s3_config

KEY = "pub/b1/1-thumb-0123abcd.jpg"


@pytest.mark.parametrize("backend", ["local", "moto"])
async def test_the_app_stack_forwards_the_protocol_and_states_local_files(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    inner: ObjectStore
    if backend == "local":
        inner = LocalStore(tmp_path / "store")
    else:
        server: S3Server = request.getfixturevalue("moto_server")
        inner = S3Store(s3_config(server))
        await inner.ensure_bucket()
    metrics = Metrics()
    stack = HotObjects(MeteredStore(inner, metrics.store_errors), 1 << 20)
    try:
        assert isinstance(stack, ObjectStore) and stack.name == inner.name
        await stack.ping()
        info = await stack.put(KEY, b"thumb bytes", content_type="image/jpeg")
        assert (await stack.head(KEY)) == info
        assert [i.key async for i in stack.list("pub/")] == [KEY]
        assert (await stack.get(KEY)).data == b"thumb bytes"
        files = local_files(stack)
        if backend == "local":
            assert files is inner and files.path_for(KEY).read_bytes() == b"thumb bytes"
        else:
            assert files is None
        # Nothing beyond the protocol leaks through a wrapper by accident: local-only features are asked for by name.
        for name in ("path_for", "sweep_temp", "ensure_bucket", "config"):
            assert not hasattr(stack, name), name
        await stack.delete(KEY)
        with pytest.raises(ObjectNotFound):
            await stack.get("pub/b1/missing.jpg")
        assert b'operation="get"' in metrics.render()  # the failed call was counted by the metered layer
    finally:
        await stack.close()
