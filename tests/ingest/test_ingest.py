"""Ingest end to end: tiers stored as promised, refusals per page, idempotent reruns, resumable after a crash."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from imagesvc.catalog import Catalog
from imagesvc.imaging.xmp import strip_c2pa
from imagesvc.storage import ObjectInfo, ObjectStore
from imagesvc.storage.local import LocalStore
from imagesvc.storage.s3 import S3Config, S3Store
from tests.library import run_ingest, settings_for
from tests.servers import S3Server


def _objects(root: Path) -> dict[str, str]:
    """Every stored object (sidecars excluded) and the sha256 of its bytes, C2PA manifest left out: signatures carry
    random salts, so two runs sign the same image differently."""
    store = LocalStore(root)

    async def walk() -> dict[str, str]:
        out = {}
        async for info in store.list(""):
            data = (await store.get(info.key)).data
            out[info.key] = hashlib.sha256(strip_c2pa(data) if info.key.startswith("pub/") else data).hexdigest()
        return out

    return asyncio.run(walk())


def test_demo_ingest_summary(demo_library: dict[str, Any]) -> None:
    summary = demo_library["summary"]
    assert (summary.books, summary.pages, summary.refused) == (4, 28, [])
    assert summary.pages_rendered == 27  # one page has no image
    assert summary.illustrations >= 30


def test_masters_are_byte_exact_and_a_jpeg_full_tier_is_the_master(demo_library: dict[str, Any]) -> None:
    manifest = json.loads(demo_library["manifest"].read_text())
    data: Path = demo_library["data"]
    catalog = Catalog(data / "catalog.sqlite3")
    try:
        book = manifest["books"][0]
        row = catalog.find_book(book["slug"])
        page = catalog.page(row["id"], 1)
        source = (demo_library["manifest"].parent / book["pages"][0]["image"]).read_bytes()
        stored = (data / "store" / page["master_key"]).read_bytes()
        assert stored == source
        full = catalog.renditions([page["id"]])[page["id"]]["full"]
        assert (data / "store" / full["clean_key"]).read_bytes() == source
    finally:
        catalog.close()


def test_awkward_masters_come_out_upright_rgb(demo_library: dict[str, Any]) -> None:
    data: Path = demo_library["data"]
    expected = json.loads((demo_library["manifest"].parent / "demo-expected.json").read_text())
    catalog = Catalog(data / "catalog.sqlite3")
    try:
        for entry in expected["pages"]:
            if entry["master"] is None or entry["master"] == "jpeg":
                continue
            book = catalog.find_book(entry["book"])
            page = catalog.page(book["id"], entry["page"])
            assert (page["width"], page["height"]) == tuple(entry["size"]), entry
            display = catalog.renditions([page["id"]])[page["id"]]["display"]
            img = Image.open(io.BytesIO((data / "store" / display["public_key"]).read_bytes()))
            assert img.mode == "RGB"
            assert (img.width > img.height) == (entry["size"][0] > entry["size"][1]), entry  # orientation kept
    finally:
        catalog.close()


def test_rerun_writes_nothing(demo_library: dict[str, Any], tmp_path: Path) -> None:
    from tests.library import copy_library

    data = copy_library(demo_library["data"], tmp_path / "data")
    before = _objects(data / "store")
    summary = run_ingest(demo_library["manifest"], settings_for(data))
    assert (summary.books_skipped, summary.pages_rendered, summary.objects_written) == (4, 0, 0)
    assert _objects(data / "store") == before


def test_broken_masters_are_refused_per_page(demo_library: dict[str, Any], tmp_path: Path) -> None:
    broken = demo_library["manifest"].parent / "broken" / "broken-manifest.json"
    settings = settings_for(tmp_path / "data")
    summary = run_ingest(broken, settings)
    reasons = {r["page"]: r["error"] for r in summary.refused}
    kinds = {r["page"]: r["reason"] for r in summary.refused}
    assert sorted(kinds.values()) == ["too_large", "truncated", "unsupported_format"]
    assert len(reasons) == 3
    assert any("decompression bomb" in e for e in reasons.values())
    assert any("truncated" in e for e in reasons.values())
    catalog = Catalog(settings.data_dir / "catalog.sqlite3")
    try:
        book = catalog.find_book("demo-broken-scans")
        pages = catalog.pages(book["id"])
        good = [p for p in pages if not p["image_unavailable"]]
        assert len(good) == 1  # the rest of the book went in
        for page in pages:
            if page["number"] in reasons:
                assert page["image_unavailable"] == 1
                assert page["unavailable_reason"] == kinds[page["number"]]  # a public word, not Pillow's text
    finally:
        catalog.close()


class Crash(RuntimeError):
    pass


class CrashingStore:
    """A real LocalStore that dies after ``budget`` writes, as a killed process would."""

    def __init__(self, inner: LocalStore, budget: int) -> None:
        self.inner, self.budget, self.name = inner, budget, "local"

    async def put(self, key: str, data: bytes, **kwargs: Any) -> ObjectInfo:
        if self.budget <= 0:
            raise Crash("killed")
        self.budget -= 1
        return await self.inner.put(key, data, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.slow
@pytest.mark.parametrize("writes_before_crash", [0, 40, 150])
def test_ingest_converges_after_a_crash(demo_library: dict[str, Any], tmp_path: Path, writes_before_crash: int) -> None:
    """A crash after any number of writes, then a rerun: the same objects and rows as one clean run."""
    manifest = demo_library["manifest"]
    data = tmp_path / "data"
    shutil.copytree(demo_library["data"] / "c2pa", data / "c2pa")  # the reference's signing key: equal file sizes
    crashing: ObjectStore = CrashingStore(LocalStore(data / "store"), writes_before_crash)  # type: ignore[assignment]
    with pytest.raises(Crash):
        run_ingest(manifest, settings_for(data), store=crashing)
    run_ingest(manifest, settings_for(data))
    assert _objects(data / "store") == _objects(demo_library["data"] / "store")
    fresh, reference = Catalog(data / "catalog.sqlite3"), Catalog(demo_library["data"] / "catalog.sqlite3")
    try:
        for table in ("pages", "renditions", "illustrations", "collection_items"):
            rows = fresh.query_all(f"SELECT * FROM {table} ORDER BY 1, 2")
            assert rows == reference.query_all(f"SELECT * FROM {table} ORDER BY 1, 2"), table
    finally:
        fresh.close()
        reference.close()


@pytest.mark.parametrize("server", ["moto_server", "ceph_rgw"])
def test_ingest_into_s3(demo_library: dict[str, Any], tmp_path: Path, server: str, request: Any) -> None:
    s3: S3Server = request.getfixturevalue(server)
    bucket = f"ingest-{tmp_path.name.lower().replace('_', '-')[-20:]}"
    config = S3Config(s3.endpoint_url, bucket, s3.region, s3.access_key, s3.secret_key)

    def store() -> S3Store:
        return S3Store(config)

    async def make_bucket() -> None:
        target = store()
        await target.ensure_bucket()
        await target.close()

    asyncio.run(make_bucket())
    broken = demo_library["manifest"].parent / "broken" / "broken-manifest.json"
    settings = settings_for(tmp_path / "data", storage="s3", image_host="https://img.example")
    first = run_ingest(broken, settings, store=store())
    assert first.objects_written > 0 and len(first.refused) == 3
    again = run_ingest(broken, settings, store=store())
    assert again.objects_written == 0

    async def keys() -> list[str]:
        target = store()
        try:
            return [info.key async for info in target.list("")]
        finally:
            await target.close()

    stored = asyncio.run(keys())
    assert len(stored) == first.objects_written
    assert any(k.startswith("masters/") for k in stored)
    assert any(k.startswith("pub/") for k in stored)
