"""Ingest from several machines: ``imagesvc ingest`` processes on different manifests, and on the same one, at once
against one PostgreSQL catalog and one S3 bucket (moto). Every book lands once and whole, every object a row names
is in the store, a rerun changes nothing, and an ingester killed mid-book leaves no half-written book that a rerun
does not finish.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from imagesvc.catalog.postgres import PostgresCatalog
from imagesvc.storage import StoreUnavailable
from imagesvc.storage.s3 import S3Config, S3Store
from tests.test_ingest_kills import IMAGESVC, ingest_env
from tests.test_postgres_nodes import SEFER, cli, manifest_of, shared  # noqa: F401 - shared is a fixture

GART = "demo-gart-der-kreuter"


def landed(url: str) -> dict[str, Any]:
    """What the catalog holds, per book: pages, illustrations and rendition rows (wall-clock columns left out)."""
    catalog = PostgresCatalog(url)
    try:
        books = {b["slug"]: b["id"] for b in catalog.query_all("SELECT slug, id FROM books ORDER BY slug")}
        out: dict[str, Any] = {}
        for slug, book_id in books.items():
            pages = catalog.query_all(
                "SELECT id, number, ocr, image_unavailable FROM pages WHERE book_id = ?", (book_id,)
            )
            illus = catalog.column("SELECT id FROM illustrations WHERE book_id = ? ORDER BY id", (book_id,))
            owners = [p["id"] for p in pages] + illus
            renditions = sorted((o, t) for o, tiers in catalog.renditions(owners).items() for t in tiers)
            out[slug] = {"pages": sorted(p["number"] for p in pages), "illustrations": illus, "renditions": renditions}
        return out
    finally:
        catalog.close()


def referenced_keys(url: str) -> set[str]:
    catalog = PostgresCatalog(url)
    try:
        keys = set(catalog.column("SELECT master_key FROM pages WHERE master_key IS NOT NULL"))
        for row in catalog.query_all("SELECT clean_key, public_key FROM renditions"):
            keys |= {row["clean_key"], row["public_key"]}
        return keys
    finally:
        catalog.close()


def stored_keys(env: dict[str, str]) -> set[str]:
    config = S3Config(
        env["IMAGESVC_S3_ENDPOINT"], env["IMAGESVC_S3_BUCKET"], "us-east-1", env["IMAGESVC_S3_ACCESS_KEY"], "x"
    )

    async def walk() -> set[str]:
        store = S3Store(config)
        try:
            return {info.key async for info in store.list("")}
        except StoreUnavailable:  # no bucket yet: the first ingest creates it
            return set()
        finally:
            await store.close()

    return asyncio.run(walk())


def start(env: dict[str, str], manifest: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [IMAGESVC, "ingest", str(manifest), "--quiet"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def whole(state: dict[str, Any], manifest_pages: dict[str, int]) -> None:
    """Every book present has all of its pages (nothing half-written is visible)."""
    for slug, book in state.items():
        assert len(book["pages"]) == manifest_pages[slug], (slug, book["pages"])


def test_ingesters_on_different_and_the_same_manifests_land_every_book_once(
    shared: dict[str, str],  # noqa: F811
    demo_library: dict[str, Any],
    tmp_path: Path,
) -> None:
    demo = demo_library["manifest"]
    both = manifest_of(demo, [SEFER, GART], tmp_path / "both.json", collections=False)
    only_sefer = manifest_of(demo, [SEFER], tmp_path / "sefer.json")
    only_gart = manifest_of(demo, [GART], tmp_path / "gart.json")
    # Four machines at once: one per book, and two racing on the whole library (so on each book).
    runs = [(only_sefer, "m1"), (only_gart, "m2"), (both, "m3"), (both, "m4")]
    procs = [start(ingest_env(tmp_path / name, **shared), manifest) for manifest, name in runs]
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err.decode()[-3000:]
    url = shared["IMAGESVC_DATABASE_URL"]
    state = landed(url)
    assert sorted(state) == [GART, SEFER]
    whole(state, {SEFER: 6, GART: 7})
    for book in state.values():
        assert len(book["renditions"]) == len(set(book["renditions"]))  # no rendition twice
        assert len(book["illustrations"]) == len(set(book["illustrations"]))
    assert referenced_keys(url) <= stored_keys(shared)  # every object a row names is there
    # A rerun converges: nothing changes, every book is skipped as unchanged.
    rerun = cli(ingest_env(tmp_path / "m1", **shared), "ingest", str(both), "--quiet")
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert "2 books (2 unchanged)" in rerun.stdout + rerun.stderr
    assert landed(url) == state


def test_an_ingester_killed_mid_book_leaves_nothing_its_rerun_does_not_finish(
    shared: dict[str, str],  # noqa: F811
    demo_library: dict[str, Any],
    tmp_path: Path,
) -> None:
    demo = demo_library["manifest"]
    both = manifest_of(demo, [SEFER, GART], tmp_path / "both.json")
    env = ingest_env(tmp_path / "killed", **shared)
    url = shared["IMAGESVC_DATABASE_URL"]
    proc = start(env, both)
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and len(stored_keys(shared)) < 20 and time.monotonic() < deadline:
            time.sleep(0.1)  # killed once it has written objects of its first book, before that book commits
        assert proc.poll() is None, "the ingest finished before it could be killed"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    whole(landed(url), {SEFER: 6, GART: 7})  # nothing half-written is visible
    rerun = cli(env, "ingest", str(both), "--quiet")
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    state = landed(url)
    assert sorted(state) == [GART, SEFER]
    whole(state, {SEFER: 6, GART: 7})
    assert referenced_keys(url) <= stored_keys(shared)
