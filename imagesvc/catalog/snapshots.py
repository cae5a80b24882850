"""Catalog snapshots: publish the catalog and vector index as verified versions in the object store; follow them.

Layout under the prefix ``P`` (``IMAGESVC_SNAPSHOT_PREFIX``): ``P/<version>/catalog.sqlite3`` (a consistent copy made
with SQLite's online backup, never a file copy of a WAL database), ``P/<version>/vectors/...`` (the live vector index,
when there is one), ``P/<version>/manifest.json`` (every file's sha256 and size) and ``P/LATEST`` (the version and the
manifest's sha256), written last: a reader that finds ``LATEST`` finds every file it names. Versions sort by time.

A node pulls a version into ``DATA_DIR/snapshots/<version>/`` through a temp folder, verifies every hash, opens it and
warms its search state off the event loop, then switches in one step (``imagesvc.web.generations``). Each serving
process needs its own data dir: a node removes snapshot folders it no longer uses.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

from imagesvc.errors import ImagesvcError, Unavailable
from imagesvc.storage import ObjectNotFound, ObjectStore, check_key, file_transfers

__all__ = [
    "KEEP_REMOTE",
    "SnapshotCorrupt",
    "backup_catalog",
    "describe",
    "fetch_snapshot",
    "newest_local",
    "publish_if_configured",
    "publish_snapshot",
    "read_latest",
]

log = logging.getLogger("imagesvc.catalog.snapshots")

KEEP_REMOTE = 3  # versions kept in the store: a node still downloading the one before LATEST can finish
FORMAT = 1
_VERSION = re.compile(r"^\d{8}T\d{6}\.\d{3}Z-[0-9a-f]{8}$")


class SnapshotCorrupt(Unavailable):
    """A pulled snapshot does not match its manifest (truncated, altered, or pruned while being read)."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def backup_catalog(source: Path, target: Path) -> None:
    """Write a consistent, self-contained copy of the SQLite file ``source`` (committed state, WAL included)."""
    src, dst = sqlite3.connect(str(source)), sqlite3.connect(str(target))
    try:
        src.backup(dst)
        dst.execute("PRAGMA journal_mode = DELETE")  # one file, no -wal to carry along
    finally:
        dst.close()
        src.close()


def _stage(data_dir: Path, catalog_path: Path, out: Path) -> dict[str, dict[str, Any]]:
    """Copy the catalog and the live vector index into ``out``; the manifest's ``files`` entry for each."""
    backup_catalog(catalog_path, out / "catalog.sqlite3")
    names = ["catalog.sqlite3"]
    vectors = data_dir / "vectors"
    try:
        pointer_bytes = (vectors / "current.json").read_bytes()
    except FileNotFoundError:
        pointer_bytes = b""
    if pointer_bytes:
        matrix = json.loads(pointer_bytes)["file"]
        (out / "vectors").mkdir()
        # The pointer first, then the file it names: `imagesvc index` keeps the previous version on disk.
        shutil.copyfile(vectors / matrix, out / "vectors" / matrix)
        (out / "vectors" / "current.json").write_bytes(pointer_bytes)
        names += ["vectors/current.json", f"vectors/{matrix}"]
    return {name: {"sha256": _sha256(out / name), "size": (out / name).stat().st_size} for name in names}


def _new_version() -> str:
    now = time.time()
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z-{os.urandom(4).hex()}"


async def publish_snapshot(
    store: ObjectStore, prefix: str, data_dir: Path, *, catalog_path: Path | None = None, keep: int = KEEP_REMOTE
) -> dict[str, Any]:
    """Publish the catalog (default ``data_dir/catalog.sqlite3``) and vector index of ``data_dir`` as a new version
    and point ``LATEST`` at it; prune all but the newest ``keep`` versions. Returns the manifest.

    Raises ``StoreUnavailable`` when the store fails (``LATEST`` then still names the previous complete version).
    """
    prefix = prefix.strip("/")
    check_key(f"{prefix}/LATEST")
    data_dir = Path(data_dir)
    version = _new_version()
    work = data_dir / f"snapshot-publish-{version}"
    work.mkdir(parents=True)
    try:
        files = await asyncio.to_thread(_stage, data_dir, catalog_path or data_dir / "catalog.sqlite3", work)
        for name in files:
            await _put_file(store, f"{prefix}/{version}/{name}", work / name)
        manifest = {
            "format": FORMAT,
            "version": version,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "files": files,
        }
        body = json.dumps(manifest, indent=2).encode()
        await store.put(f"{prefix}/{version}/manifest.json", body, content_type="application/json")
        latest = {"version": version, "manifest_sha256": hashlib.sha256(body).hexdigest()}
        await store.put(f"{prefix}/LATEST", json.dumps(latest).encode(), content_type="application/json")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    await _prune(store, prefix, keep)
    log.info("published catalog snapshot %s (%d files)", version, len(files))
    return manifest


async def _put_file(store: ObjectStore, key: str, path: Path) -> None:
    """Upload a staged file in bounded memory (a multipart upload read part by part from the file on S3)."""
    await file_transfers(store).put_file(key, path)


async def _prune(store: ObjectStore, prefix: str, keep: int) -> None:
    versions = sorted({info.key[len(prefix) + 1 :].split("/")[0] async for info in store.list(f"{prefix}/")})
    old = [v for v in versions if _VERSION.match(v)][:-keep] if keep > 0 else []
    for version in old:
        keys = [info.key async for info in store.list(f"{prefix}/{version}/")]
        for key in sorted(keys, key=lambda k: k.endswith("manifest.json")):  # the manifest last
            await store.delete(key)


async def publish_if_configured(settings: Any, store: ObjectStore) -> str | None:
    """Publish a snapshot when ``IMAGESVC_SNAPSHOT_PREFIX`` is set (after ingest and index); returns the version."""
    if not settings.snapshot_prefix:
        return None
    manifest = await publish_snapshot(store, settings.snapshot_prefix, Path(settings.data_dir))
    return str(manifest["version"])


async def read_latest(store: ObjectStore, prefix: str) -> dict[str, str] | None:
    """The ``LATEST`` pointer (``version``, ``manifest_sha256``), or None when nothing was published yet."""
    try:
        pointer = json.loads((await store.get(f"{prefix.strip('/')}/LATEST")).data)
    except ObjectNotFound:
        return None
    except ValueError as exc:
        raise SnapshotCorrupt(f"The snapshot pointer {prefix}/LATEST is not JSON: {exc}.") from exc
    if not isinstance(pointer, dict) or not _VERSION.match(str(pointer.get("version", ""))):
        raise SnapshotCorrupt(f"The snapshot pointer {prefix}/LATEST names no valid version: {pointer!r}.")
    return {"version": pointer["version"], "manifest_sha256": str(pointer.get("manifest_sha256", ""))}


def _check(name: str, got: tuple[int, str], want: dict[str, Any]) -> None:
    if got != (want.get("size"), want.get("sha256")):
        raise SnapshotCorrupt(f"Snapshot file {name!r} does not match its manifest (size or sha256).")


async def fetch_snapshot(store: ObjectStore, prefix: str, pointer: dict[str, str], root: Path) -> Path:
    """Download and verify the version ``pointer`` names into ``root/<version>/`` (reused when already there).

    Raises ``SnapshotCorrupt`` on any mismatch, ``ObjectNotFound`` if the version was pruned meanwhile,
    ``StoreUnavailable`` when the store fails; a failed pull leaves nothing behind.
    """
    prefix, version = prefix.strip("/"), pointer["version"]
    final = root / version
    if (final / "manifest.json").exists():
        return final
    body = (await store.get(f"{prefix}/{version}/manifest.json")).data
    if hashlib.sha256(body).hexdigest() != pointer["manifest_sha256"]:
        raise SnapshotCorrupt(f"The manifest of snapshot {version} does not match the sha256 in LATEST.")
    manifest = json.loads(body)
    tmp = root / f"tmp-{version}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    transfers = file_transfers(store)
    try:
        for name, want in manifest["files"].items():
            if name.startswith("/") or ".." in name.split("/"):
                raise SnapshotCorrupt(f"Snapshot {version} names a file outside its folder: {name!r}.")
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            # streamed to disk a chunk at a time and hashed on the way: never the whole file in memory
            _check(name, await transfers.get_file(f"{prefix}/{version}/{name}", tmp / name), want)
        (tmp / "manifest.json").write_bytes(body)  # last: its presence marks a complete, verified folder
        try:
            os.replace(tmp, final)
        except OSError:
            if not (final / "manifest.json").exists():
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # another worker of this node pulled the same version first
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def newest_local(root: Path) -> Path | None:
    """The newest complete snapshot folder already pulled here (used when the store is down at start)."""
    found = [p for p in root.glob("*/manifest.json") if _VERSION.match(p.parent.name)] if root.is_dir() else []
    return max(found, key=lambda p: p.parent.name).parent if found else None


def describe(exc: BaseException) -> str:
    return exc.message if isinstance(exc, ImagesvcError) else f"{type(exc).__name__}: {exc}"
