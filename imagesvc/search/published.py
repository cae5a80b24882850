"""Search indexes computed once by ``imagesvc index`` and published to the object store, named by content, with the
current version of each kind in the catalog (table ``search_indexes``, migration 8); serving nodes download, verify
and load what the catalog names, and never build an index themselves.

A published index is the set of files its loader reads from a data dir (``textvectors/``: the dense text index,
``vectors/``: CLIP's, ``featureindex/``: search by image's block index), unchanged in format. Each file is stored at
``indexes/<kind>/files/<sha256>``; a manifest (format, kind, model, illustrations, and each file's path, sha256 and
size) at ``indexes/<kind>/<digest>.json``, where ``digest`` is the manifest's own sha256. The catalog row is written
last, in a catalog transaction (which moves what nodes watch for changes), so a row always names a complete upload.

A node (``imagesvc.search.index_follower``) reads the row, streams each file into
``DATA_DIR/index-cache/<kind>/<digest>/`` through a temp folder, checks every sha256 and size against the manifest
and the manifest against the row, then loads it in a worker thread; only then does the new index replace the one in
service. A missing or altered file is refused: the node keeps the index it has and does not try that digest again.
A copy already in the cache (fetched by another worker, or before a restart) is checked against the row the same
way each time it is loaded, never trusted for being there: one that does not match is removed and fetched again.
Older cached versions are removed after a load.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import secrets
import shutil
import time
import zipfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from imagesvc.errors import ImagesvcError, Unavailable
from imagesvc.search.threads import off_loop
from imagesvc.storage import ObjectNotFound, ObjectStore, file_transfers

__all__ = [
    "FETCH_ERRORS",
    "FOLDERS",
    "IndexCorrupt",
    "Published",
    "current",
    "fetch",
    "publish",
    "seed_local",
    "verify_cached",
]

log = logging.getLogger("imagesvc.search.published")

FORMAT = 1
FOLDERS = {"text": "textvectors", "clip": "vectors", "blocks": "featureindex"}  # the data-dir layout of each kind
CACHE = "index-cache"
KEEP_CACHED = 2  # versions of a kind kept in a node's cache: the one in service and the one before it


class IndexCorrupt(Unavailable):
    """A published index does not match what the catalog names (an altered, truncated or foreign file)."""


# What fetching or loading a published index may raise (faiss reports a bad file as RuntimeError).
FETCH_ERRORS = (ImagesvcError, OSError, ValueError, KeyError, EOFError, RuntimeError, zipfile.BadZipFile)


@dataclass(frozen=True)
class Published:
    """What one ``publish`` did."""

    kind: str
    digest: str
    files: int
    uploaded: int  # bytes sent to the store (files already there by content are not sent again)
    changed: bool  # False: the catalog already named this very index

    def line(self) -> str:
        if not self.changed:
            return f"{self.kind} index: sha256:{self.digest[:12]} already published"
        sent = f"{self.files} files, {self.uploaded} bytes sent"
        return f"{self.kind} index: published sha256:{self.digest[:12]} ({sent})"


def _sha256(path: Path) -> tuple[int, str]:
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def local_files(kind: str, data_dir: Path) -> list[str] | None:
    """The files (relative to ``data_dir``) of the current index of ``kind`` there; None when there is none."""
    folder = FOLDERS[kind]
    try:
        pointer = json.loads((Path(data_dir) / folder / "current.json").read_text())
    except (OSError, ValueError):
        return None
    if kind == "blocks":
        names = [f"index-{pointer['digest']}.{ext}" for ext in ("faiss", "npz", "desc.npy", "fine.npy")]
        names = [n for n in names if (Path(data_dir) / folder / n).exists()]  # desc.npy: from v3 on; fine.npy: 41 px
    else:
        names = [pointer["file"]]
    return [f"{folder}/current.json", *(f"{folder}/{n}" for n in names)]


def current(catalog: Any, kind: str) -> dict[str, Any] | None:
    """The catalog's row for ``kind`` (``digest``, ``object_key``, ``model``, ...), or None before the first publish.
    One indexed read."""
    return catalog.query_one("SELECT * FROM search_indexes WHERE kind = ?", (kind,))


def _digest(manifest: dict[str, Any]) -> tuple[bytes, str]:
    body = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    return body, hashlib.sha256(body).hexdigest()


async def publish(
    catalog: Any, store: ObjectStore, kind: str, data_dir: Path, *, model: str, illustrations: int
) -> Published | None:
    """Publish the current index of ``kind`` in ``data_dir`` and name it in the catalog; None when ``data_dir`` has
    none. Files go to the store first (streamed, each once by content), then the manifest, then the catalog row."""
    names = local_files(kind, data_dir)
    if names is None:
        return None
    sums = {name: await off_loop(_sha256, Path(data_dir) / name) for name in names}
    manifest = {
        "format": FORMAT,
        "kind": kind,
        "model": model,
        "illustrations": illustrations,
        "files": {name: {"sha256": sha, "size": size} for name, (size, sha) in sums.items()},
    }
    body, digest = _digest(manifest)
    manifest_key = f"indexes/{kind}/{digest}.json"
    before = current(catalog, kind)
    if before is not None and before["digest"] == digest and await store.head(manifest_key) is not None:
        return Published(kind, digest, len(names), 0, changed=False)
    transfers, uploaded = file_transfers(store), 0
    for name, (size, sha) in sums.items():
        key = f"indexes/{kind}/files/{sha}"
        there = await store.head(key)
        if there is None or there.size != size:
            await transfers.put_file(key, Path(data_dir) / name)
            uploaded += size
    await store.put(manifest_key, body, content_type="application/json")
    row = {
        "kind": kind,
        "digest": digest,
        "object_key": manifest_key,
        "model": model,
        "illustrations": illustrations,
        "bytes": sum(size for size, _ in sums.values()),
        "built_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
    }
    with catalog.transaction() as conn:  # moves data_version / catalog_state.changes: nodes follow it
        conn.execute(
            "INSERT INTO search_indexes (kind, digest, object_key, model, illustrations, bytes, built_at)"
            " VALUES (:kind, :digest, :object_key, :model, :illustrations, :bytes, :built_at)"
            " ON CONFLICT (kind) DO UPDATE SET digest = excluded.digest, object_key = excluded.object_key,"
            " model = excluded.model, illustrations = excluded.illustrations, bytes = excluded.bytes,"
            " built_at = excluded.built_at",
            row,
        )
    await _prune(store, kind, {digest, before["digest"] if before else digest})
    log.info("published the %s index sha256:%s (%d bytes sent)", kind, digest, uploaded)
    return Published(kind, digest, len(names), uploaded, changed=True)


async def _prune(store: ObjectStore, kind: str, keep: set[str]) -> None:
    """Remove the objects of ``kind`` that neither kept version names (the one before stays for nodes that are
    still downloading it)."""
    wanted = {f"indexes/{kind}/{d}.json" for d in keep}
    for key in list(wanted):
        try:
            manifest = json.loads((await store.get(key)).data)
        except (ObjectNotFound, ValueError):
            wanted.discard(key)
            continue
        wanted |= {f"indexes/{kind}/files/{f['sha256']}" for f in manifest["files"].values()}
    for key in [info.key async for info in store.list(f"indexes/{kind}/")]:
        if key not in wanted:
            await store.delete(key)


def _inside(name: str, kind: str) -> bool:
    parts = name.split("/")
    return len(parts) == 2 and parts[0] == FOLDERS[kind] and not parts[1].startswith(".") and ".." not in parts


async def fetch(store: ObjectStore, row: dict[str, Any], root: Path) -> Path:
    """The verified folder of the index ``row`` names, under ``root/<kind>/<digest>/``: a copy already there checked
    against ``row`` (``verify_cached``; removed and downloaded again when it does not match), else downloaded; a data
    dir for that kind's loader. Raises ``IndexCorrupt`` for a manifest or file that does not match, ``ObjectNotFound``
    for a missing one, ``StoreUnavailable``; a failed fetch leaves nothing behind."""
    kind, digest = row["kind"], row["digest"]
    final = Path(root) / kind / digest
    if (final / "manifest.json").exists():
        try:
            await off_loop(verify_cached, final, kind, digest)
            return final
        except (IndexCorrupt, OSError, ValueError, KeyError, TypeError) as exc:  # altered, cut, or being replaced
            why = exc.message if isinstance(exc, IndexCorrupt) else f"{type(exc).__name__}: {exc}"
            log.error("the cached copy of the published %s index sha256:%s is refused, fetched again: %s",
                      kind, digest[:12], why)  # fmt: skip
            await off_loop(shutil.rmtree, final, ignore_errors=True)
    body = (await store.get(row["object_key"])).data
    if hashlib.sha256(body).hexdigest() != digest:
        raise IndexCorrupt(f"The manifest of the published {kind} index does not match sha256:{digest}.")
    manifest = json.loads(body)
    tmp = Path(root) / kind / f".tmp-{digest[:12]}-{os.getpid()}-{secrets.token_hex(4)}"
    transfers = file_transfers(store)
    try:
        for name, want in manifest["files"].items():
            if not _inside(name, kind):
                raise IndexCorrupt(f"The published {kind} index names a file outside its folder: {name!r}.")
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            size, sha = await transfers.get_file(f"indexes/{kind}/files/{want['sha256']}", tmp / name)
            if (size, sha) != (want["size"], want["sha256"]):
                raise IndexCorrupt(
                    f"File {name!r} of the published {kind} index sha256:{digest[:12]} does not match its manifest."
                )
        await off_loop(_settle, tmp, final, body)
    except BaseException:
        await asyncio.shield(off_loop(shutil.rmtree, tmp, ignore_errors=True))
        raise
    return final


def verify_cached(folder: Path, kind: str, digest: str) -> None:
    """Check a node's cached copy of a published index against ``digest``, the catalog's, as when it was fetched:
    its manifest's sha256, then each file's size and sha256 against the manifest (blocking: it reads every file;
    ~1 s a GiB on one core). ``IndexCorrupt`` for a copy that does not match, ``OSError`` for a missing file."""
    body = (folder / "manifest.json").read_bytes()
    if hashlib.sha256(body).hexdigest() != digest:
        raise IndexCorrupt(f"The cached manifest of the published {kind} index does not match sha256:{digest}.")
    for name, want in json.loads(body)["files"].items():
        if not _inside(name, kind):
            raise IndexCorrupt(f"The published {kind} index names a file outside its folder: {name!r}.")
        if _sha256(folder / name) != (want["size"], want["sha256"]):
            raise IndexCorrupt(f"Cached file {name!r} of the published {kind} index does not match its manifest.")


def _settle(tmp: Path, final: Path, manifest: bytes) -> None:
    """Write the manifest last (its presence marks a complete, verified folder) and rename the folder into place."""
    (tmp / "manifest.json").write_bytes(manifest)
    try:
        os.replace(tmp, final)
    except OSError:
        if not (final / "manifest.json").exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)  # another worker of this node fetched it first


def drop_cached(root: Path, kind: str, keep: str) -> None:
    """Remove cached versions of ``kind`` but ``keep`` and the newest other one (blocking)."""
    folder = Path(root) / kind
    if not folder.is_dir():
        return
    others = [p for p in folder.iterdir() if p.name != keep and not p.name.startswith(".")]
    others.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for old in others[KEEP_CACHED - 1 :]:
        shutil.rmtree(old, ignore_errors=True)
    for tmp in folder.glob(".tmp-*"):  # a fetch killed mid-way, not one running now
        if time.time() - tmp.stat().st_mtime > 3600:
            shutil.rmtree(tmp, ignore_errors=True)


async def seed_local(catalog: Any, store: ObjectStore, kind: str, data_dir: Path) -> bool:
    """Give a data dir without an index of ``kind`` the published one, so ``imagesvc index`` on a fresh machine
    embeds only what changed since; True when it did."""
    row = current(catalog, kind)
    if row is None or local_files(kind, data_dir) is not None:
        return False
    source = await fetch(store, row, Path(data_dir) / CACHE)
    target = Path(data_dir) / FOLDERS[kind]
    target.mkdir(parents=True, exist_ok=True)
    names = sorted((source / FOLDERS[kind]).iterdir(), key=lambda p: p.name == "current.json")  # the pointer last
    for path in names:
        await off_loop(shutil.copyfile, path, target / path.name)
    log.info("%s index: seeded from the published sha256:%s", kind, row["digest"][:12])
    return True
