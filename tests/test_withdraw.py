"""A takedown that takes down: ``imagesvc books withdraw`` makes a book's public images unreachable on every node and
hides it from everything derived from it; ``imagesvc books restore`` puts back the same bytes at the same URLs.

The commands run as real processes against a catalog and a store that two app instances already serve: the local
store (its ``pub/`` served under ``/img/`` by each instance) and a moto S3 bucket (``pub/`` read without a signature,
as a CDN in front of a public prefix reads it).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from imagesvc.app import build_app
from imagesvc.catalog import Catalog
from imagesvc.catalog.backends import open_catalog
from imagesvc.settings import load_settings
from imagesvc.storage.s3 import S3Config, S3Store
from tests.http.keys import new_key
from tests.library import SITE, settings_for
from tests.servers import S3Server, create_database
from tests.test_ingest_kills import IMAGESVC, ingest_env
from tests.test_postgres_nodes import SEFER, manifest_of

COLLECTION = "demo-highlights"  # holds one plate of SEFER
TAKEDOWN_BOUND = 5.0  # seconds within which every node stops serving a withdrawn book's public images


def books_command(env: dict[str, str], *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [IMAGESVC, "books", *args, "--json"], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout))


def image_paths(body: Any) -> set[str]:
    """Every ``/img/...`` path named anywhere in a JSON answer."""
    if isinstance(body, dict):
        return set().union(*(image_paths(v) for v in body.values())) if body else set()
    if isinstance(body, list):
        return set().union(*(image_paths(v) for v in body)) if body else set()
    if isinstance(body, str) and body.startswith(f"{SITE}/img/"):
        return {body.removeprefix(SITE)}
    return set()


@pytest.fixture
async def nodes(data_dir: Path) -> AsyncIterator[list[TestClient]]:
    """Two app instances over one catalog and one local store, as two nodes of one deployment."""
    clients = [TestClient(TestServer(build_app(settings_for(data_dir)))) for _ in range(2)]
    for client in clients:
        await client.start_server()
    yield clients
    for client in clients:
        await client.close()


async def _json(client: TestClient, path: str, key: str | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with client.get(path, headers=headers) as resp:
        return resp.status, await resp.json()


async def shown(client: TestClient, book_id: str, key: str) -> dict[str, bool]:
    """Where the book shows: each view derived from the catalog, read through a node's doors."""
    status, _ = await _json(client, f"/api/books/{SEFER}")
    listing = (await _json(client, "/api/books?limit=50"))[1]["items"]
    gallery = (await _json(client, "/api/gallery?limit=50"))[1]["items"]
    collection = (await _json(client, f"/api/gallery/collections/{COLLECTION}"))[1]["items"]
    dataset = (await _json(client, "/api/dataset/images?limit=500", key))[1]["items"]
    found = (await _json(client, "/api/books?search=Kokhavim"))[1]["items"]
    searched = (await _json(client, "/api/gallery?query=zodiac%20sun"))[1]["items"]
    statuses = {}
    for name, path in {
        "manifest": f"/iiif/3/manifest/{SEFER}",
        "iiif image": f"/iiif/3/{SEFER}-1/info.json",
        "image": f"/api/image?book_id={SEFER}&page=1&tier=thumb",
        "within book": f"/api/books/{SEFER}/search?q=sun",
    }.items():
        async with client.get(path, headers={"Authorization": f"Bearer {key}"}) as resp:
            statuses[name] = resp.status == 200
    return {
        "book": status == 200,
        "listing": any(b["slug"] == SEFER for b in listing),
        "book search": any(b["slug"] == SEFER for b in found),
        "gallery": any(i["book_id"] == book_id for i in gallery),
        "gallery search": any(i["book_id"] == book_id for i in searched),
        "collection": any(i["book_id"] == book_id for i in collection),
        "dataset": any(i["book_id"] == book_id for i in dataset),
        **statuses,
    }


def last_change(data_dir: Path) -> tuple[str, str]:
    catalog = Catalog(data_dir / "catalog.sqlite3")
    try:
        row = catalog.query_one("SELECT book_id, kind FROM book_changes ORDER BY seq DESC LIMIT 1")
        return row["book_id"], row["kind"]
    finally:
        catalog.close()


async def statuses(client: TestClient, paths: set[str]) -> dict[str, int]:
    out = {}
    for path in sorted(paths):
        async with client.get(path) as resp:
            out[path] = resp.status
    return out


async def bytes_of(client: TestClient, paths: set[str]) -> dict[str, bytes]:
    out = {}
    for path in sorted(paths):
        async with client.get(path) as resp:
            assert resp.status == 200, path
            out[path] = await resp.read()
    return out


async def test_a_withdrawn_book_is_gone_from_every_node_and_comes_back_whole(
    nodes: list[TestClient], data_dir: Path, demo_library: dict[str, Any], tmp_path: Path
) -> None:
    first, second = nodes
    key, _ = new_key(data_dir, "enterprise")
    env = ingest_env(data_dir, IMAGESVC_SITE_URL=SITE)
    status, book = await _json(first, f"/api/books/{SEFER}?include_images=true")
    assert status == 200
    book_id = book["id"]
    images = await _json(first, f"/api/books/{SEFER}/images?include_images=true")
    paths = image_paths(book) | image_paths(images[1])
    assert any("-full-" in p for p in paths) and any("/illus/" in p for p in paths), sorted(paths)[:5]
    before = await bytes_of(second, paths)
    for node in nodes:
        assert all((where := await shown(node, book_id, key)).values()), where

    done = books_command(env, "withdraw", SEFER)
    withdrawn_at = time.monotonic()
    assert done["withdrawn"] and done["moved"] == done["public_objects"] >= len(paths) and not done["missing"]
    assert {u.removeprefix(SITE) for u in done["urls"]} >= paths
    # Every node: each public tier answers 404 within the bound (checked until it does; a hang exceeds the bound).
    for node in nodes:
        while set((found := await statuses(node, paths)).values()) != {404}:
            assert time.monotonic() - withdrawn_at < TAKEDOWN_BOUND, found
            await asyncio.sleep(0.05)
        assert not any((where := await shown(node, book_id, key)).values()), where
    assert last_change(data_dir) == (book["id"], "Delete")
    assert books_command(env, "withdraw", SEFER)["moved"] == 0  # a second run finds nothing left to move
    # A rerun of the book's manifest (a routine, idempotent ingest) does not undo the takedown.
    manifest = manifest_of(demo_library["manifest"], [SEFER], tmp_path / "sefer.json")
    done = subprocess.run([IMAGESVC, "ingest", str(manifest), "--json"], env=env, capture_output=True, timeout=300)
    assert done.returncode == 0 and json.loads(done.stdout)["books_skipped"] == 1, done.stderr[-2000:]
    for node in nodes:
        assert set((await statuses(node, paths)).values()) == {404}
        assert not any((where := await shown(node, book_id, key)).values()), where

    done = books_command(env, "restore", SEFER)
    assert not done["withdrawn"] and done["moved"] == done["public_objects"] and not done["missing"]
    for node in nodes:
        assert await bytes_of(node, paths) == before  # the same bytes at the same URLs
        assert all((where := await shown(node, book_id, key)).values()), where
    assert last_change(data_dir) == (book["id"], "Create")


def unsigned_get(server: S3Server, bucket: str, key: str) -> tuple[int, bytes]:
    """An anonymous read of ``key``, as a CDN in front of the bucket's public prefix makes it."""
    try:
        with urllib.request.urlopen(f"{server.endpoint_url}/{bucket}/{key}", timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


@pytest.mark.slow
@pytest.mark.parametrize("catalog", ["sqlite", "postgres"])
def test_on_s3_the_public_objects_of_a_withdrawn_book_are_not_readable_until_restored(
    moto_server: S3Server, demo_library: dict[str, Any], tmp_path: Path, catalog: str, request: Any
) -> None:
    bucket = f"wd-{secrets.token_hex(5)}"
    if catalog == "postgres":
        server = request.getfixturevalue("postgres_server")
        url = create_database(server, f"wd_{secrets.token_hex(5)}")
        database = {"IMAGESVC_CATALOG": "postgres", "IMAGESVC_DATABASE_URL": url}
    else:
        database = {}
    s3 = {
        **database,
        "IMAGESVC_STORAGE": "s3",
        "IMAGESVC_S3_ENDPOINT": moto_server.endpoint_url,
        "IMAGESVC_S3_BUCKET": bucket,
        "IMAGESVC_S3_ACCESS_KEY": moto_server.access_key,
        "IMAGESVC_S3_SECRET_KEY": moto_server.secret_key,
        "IMAGESVC_IMAGE_HOST": "https://img.example",
    }
    env = ingest_env(tmp_path / "data", **s3)
    manifest = manifest_of(demo_library["manifest"], [SEFER], tmp_path / "sefer.json")
    done = subprocess.run([IMAGESVC, "ingest", str(manifest), "--quiet"], env=env, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    opened = open_catalog(load_settings(env))
    try:
        keys = opened.column("SELECT public_key FROM renditions ORDER BY 1")
    finally:
        opened.close()
    assert keys and all(k.startswith("pub/") for k in keys)
    public_prefix_only(moto_server, bucket)
    before = {k: unsigned_get(moto_server, bucket, k) for k in keys}
    assert {status for status, _ in before.values()} == {200}

    withdrawn = books_command(env, "withdraw", SEFER)
    assert withdrawn["moved"] == len(keys) and withdrawn["urls"][0].startswith("https://img.example/")
    assert {unsigned_get(moto_server, bucket, k)[0] for k in keys} == {404}
    assert not set(keys) & asyncio.run(_listed(moto_server, bucket, "pub/"))  # nothing left under the public prefix
    kept = asyncio.run(_listed(moto_server, bucket, "withdrawn/"))
    assert kept == {f"withdrawn/{k}" for k in keys}  # kept, privately: no anonymous read reaches them
    assert {unsigned_get(moto_server, bucket, k)[0] for k in kept} == {403}

    books_command(env, "restore", SEFER)
    assert {k: unsigned_get(moto_server, bucket, k) for k in keys} == before


def public_prefix_only(server: S3Server, bucket: str) -> None:
    """The bucket policy of a deployment (docs/deploy.md): anonymous reads of ``pub/`` only."""
    import botocore.session

    client = botocore.session.get_session().create_client(
        "s3",
        endpoint_url=server.endpoint_url,
        region_name=server.region,
        aws_access_key_id=server.access_key,
        aws_secret_access_key=server.secret_key,
    )
    statement = {
        "Effect": "Allow",
        "Principal": "*",
        "Action": "s3:GetObject",
        "Resource": f"arn:aws:s3:::{bucket}/pub/*",
    }
    client.put_bucket_policy(Bucket=bucket, Policy=json.dumps({"Version": "2012-10-17", "Statement": [statement]}))
    client.close()


async def _listed(server: S3Server, bucket: str, prefix: str) -> set[str]:
    store = S3Store(S3Config(server.endpoint_url, bucket, server.region, server.access_key, server.secret_key))
    try:
        return {info.key async for info in store.list(prefix)}
    finally:
        await store.close()


def test_an_unknown_book_is_not_found_in_the_one_error_shape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from imagesvc.cli import main

    monkeypatch.setenv("IMAGESVC_DATA_DIR", str(tmp_path))
    for command in ("withdraw", "restore"):
        assert main(["books", command, "no-such-book", "--json"]) == 1
        error = json.loads(capsys.readouterr().out)
        assert error["error"] == "not_found" and error["book_id"] == "no-such-book" and error["recovery"]
