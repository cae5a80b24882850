"""The ``local`` object store: one file per key under a root directory, written atomically, with an MD5 ETag sidecar.

Layout: key ``a/b/c.jpg`` is the file ``ROOT/a/b/c.jpg``; its metadata (ETag, content type) is the JSON sidecar
``ROOT/a/b/.c.jpg.meta``. Temp files are ``.tmp-*`` in the same directory. ``check_key`` forbids segments starting
with ``.``, so neither can collide with a key, and listings skip them.

Why a sidecar: HEAD and listings must not re-read a 100 MB master to hash it. The sidecar records the data file's
inode, size and mtime; when they do not match the data file (a crash between the two writes, or two unconditional
writers racing) the ETag is recomputed from the data, so a stale sidecar is slow, never wrong.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import BinaryIO

from imagesvc.errors import InvalidRequest
from imagesvc.storage import (
    InvalidKey,
    ObjectExists,
    ObjectInfo,
    ObjectNotFound,
    StoredObject,
    StoreUnavailable,
    check_key,
)

__all__ = ["LocalStore"]

_DEFAULT_TYPE = "application/octet-stream"
_CHUNK = 1 << 20  # bytes a whole-file copy holds at a time
# (name, is a directory, metadata of a file); module level because the class's own ``list`` shadows the builtin.
_Entries = list[tuple[str, bool, ObjectInfo | None]]


def _sidecar(path: Path) -> Path:
    return path.with_name(f".{path.name}.meta")


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_temp(directory: Path, data: bytes) -> tuple[Path, os.stat_result]:
    """Write ``data`` to a new fsynced temp file in ``directory``; return its path and stat."""
    tmp = directory / f".tmp-{secrets.token_hex(8)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        return tmp, os.fstat(fd)
    finally:
        os.close(fd)


class LocalStore:
    """An ``ObjectStore`` in a directory. Bad keys raise ``InvalidKey``; so does a key that would need a file where
    a directory is (``a/b`` when ``a/b/c`` exists, or the reverse), which S3 allows but a file system cannot hold."""

    name = "local"

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()

    def path_for(self, key: str) -> Path:
        """The file holding ``key`` (it may not exist), for serving with sendfile. Raises ``InvalidKey``."""
        return self.root.joinpath(*check_key(key).split("/"))

    async def put(
        self, key: str, data: bytes, *, content_type: str = _DEFAULT_TYPE, if_none_match: bool = False
    ) -> ObjectInfo:
        path = self.path_for(key)
        return await asyncio.to_thread(self._put, key, path, bytes(data), content_type, if_none_match)

    def _put(self, key: str, path: Path, data: bytes, content_type: str, if_none_match: bool) -> ObjectInfo:
        _make_room(key, path)
        info = ObjectInfo(key=key, size=len(data), etag=hashlib.md5(data).hexdigest(), content_type=content_type)
        tmp, st = _write_temp(path.parent, data)
        try:
            if if_none_match:
                # link() fails if the name is taken, atomically, so exactly one of many concurrent writers wins.
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    raise ObjectExists(key) from None
            else:
                os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        self._write_sidecar(path, info, st)
        _fsync_dir(path.parent)
        return info

    def _write_sidecar(self, path: Path, info: ObjectInfo, st: os.stat_result) -> None:
        meta = {
            "etag": info.etag,
            "content_type": info.content_type,
            "size": st.st_size,
            "ino": st.st_ino,
            "mtime_ns": st.st_mtime_ns,
        }
        tmp = path.parent / f".tmp-{secrets.token_hex(8)}"
        tmp.write_text(json.dumps(meta), encoding="utf-8")
        os.replace(tmp, _sidecar(path))

    def _info(self, key: str, path: Path, st: os.stat_result, fh: BinaryIO | None = None) -> ObjectInfo:
        """Metadata for the data file whose stat is ``st``, from the sidecar when it describes that very file.

        Otherwise the ETag is computed from the file itself: from ``fh`` when the caller holds it open (so it
        describes the bytes that caller read, even if the key was replaced meanwhile), else by opening ``path``.
        """
        try:
            meta = json.loads(_sidecar(path).read_text(encoding="utf-8"))
            if (meta["ino"], meta["size"], meta["mtime_ns"]) == (st.st_ino, st.st_size, st.st_mtime_ns):
                return ObjectInfo(key=key, size=st.st_size, etag=meta["etag"], content_type=meta["content_type"])
            content_type = meta.get("content_type", _DEFAULT_TYPE)
        except (OSError, ValueError, KeyError, TypeError):
            content_type = _DEFAULT_TYPE
        digest = hashlib.md5()
        with contextlib.nullcontext(fh) if fh is not None else path.open("rb") as source:
            source.seek(0)
            while chunk := source.read(1 << 20):
                digest.update(chunk)
        return ObjectInfo(key=key, size=st.st_size, etag=digest.hexdigest(), content_type=content_type)

    async def put_file(self, key: str, source: Path, *, content_type: str = _DEFAULT_TYPE) -> ObjectInfo:
        """``put`` of the file ``source``, copied a chunk at a time."""
        path = self.path_for(key)
        return await asyncio.to_thread(self._put_file, key, path, Path(source), content_type)

    def _put_file(self, key: str, path: Path, source: Path, content_type: str) -> ObjectInfo:
        _make_room(key, path)
        tmp = path.parent / f".tmp-{secrets.token_hex(8)}"
        digest = hashlib.md5()
        try:
            with open(source, "rb") as src, open(tmp, "xb") as out:
                while chunk := src.read(_CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
                st = os.fstat(out.fileno())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        info = ObjectInfo(key=key, size=st.st_size, etag=digest.hexdigest(), content_type=content_type)
        self._write_sidecar(path, info, st)
        _fsync_dir(path.parent)
        return info

    async def get_file(self, key: str, target: Path) -> tuple[int, str]:
        """Copy object ``key`` into the new file ``target`` a chunk at a time: (size, sha256)."""
        path = self.path_for(key)
        return await asyncio.to_thread(self._get_file, key, path, Path(target))

    def _get_file(self, key: str, path: Path, target: Path) -> tuple[int, str]:
        try:
            src = path.open("rb")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise ObjectNotFound(key) from None
        digest, size = hashlib.sha256(), 0
        try:
            with src, open(target, "xb") as out:
                while chunk := src.read(_CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
                    size += len(chunk)
        except BaseException:
            target.unlink(missing_ok=True)
            raise
        return size, digest.hexdigest()

    async def get(self, key: str, *, byte_range: tuple[int, int] | None = None) -> StoredObject:
        path = self.path_for(key)
        if byte_range is not None and (byte_range[0] < 0 or byte_range[1] < byte_range[0]):
            raise InvalidRequest(f"Invalid byte range {byte_range!r}: expected 0 <= start <= end.")
        return await asyncio.to_thread(self._get, key, path, byte_range)

    def _get(self, key: str, path: Path, byte_range: tuple[int, int] | None) -> StoredObject:
        try:
            fh = path.open("rb")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise ObjectNotFound(key) from None
        with fh:
            # Stat and read the same open file, so the metadata matches the bytes even if the key is replaced now.
            st = os.fstat(fh.fileno())
            if byte_range is None:
                data = fh.read()
            else:
                start, end = byte_range
                if start >= st.st_size:
                    raise InvalidRequest(
                        f"Byte range starts at {start}, past the end of {key!r} ({st.st_size} bytes).",
                        details={"key": key, "size": st.st_size},
                    )
                fh.seek(start)
                data = fh.read(min(end, st.st_size - 1) - start + 1)
            info = self._info(key, path, st, fh)
        return StoredObject(info=info, data=data)

    async def head(self, key: str) -> ObjectInfo | None:
        path = self.path_for(key)
        return await asyncio.to_thread(self._head, key, path)

    def _head(self, key: str, path: Path) -> ObjectInfo | None:
        try:
            st = path.stat()
            if not path.is_file():
                return None
            return self._info(key, path, st)
        except (FileNotFoundError, NotADirectoryError):
            return None

    async def delete(self, key: str) -> None:
        path = self.path_for(key)
        await asyncio.to_thread(self._delete, path)

    def _delete(self, path: Path) -> None:
        # Empty directories are left in place: removing them would race with a concurrent put under them.
        for victim in (path, _sidecar(path)):
            with contextlib.suppress(FileNotFoundError, NotADirectoryError, IsADirectoryError):
                victim.unlink()

    async def sweep_temp(self, older_than: float = 600.0) -> int:
        """Delete temp files a killed writer left behind, if older than ``older_than`` seconds; returns how many.

        Readers never see temp files; this only reclaims their space. The age guard keeps a concurrent writer's
        file-in-progress safe. Not part of the storage protocol: S3 has no partial objects to sweep.
        """
        return await asyncio.to_thread(self._sweep_temp, time.time() - older_than)

    def _sweep_temp(self, cutoff: float) -> int:
        removed = 0
        for folder, _, names in os.walk(self.root):
            for name in names:
                if not name.startswith(".tmp-"):
                    continue
                path = Path(folder) / name
                with contextlib.suppress(FileNotFoundError):
                    if path.stat().st_mtime < cutoff:
                        path.unlink()
                        removed += 1
        return removed

    async def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        directory, _, name_prefix = prefix.rpartition("/")
        if directory:
            try:
                check_key(directory)
            except InvalidKey:
                return  # no valid key can start with this prefix
        async for info in self._walk(directory, name_prefix):
            yield info

    async def _walk(self, directory: str, name_prefix: str) -> AsyncIterator[ObjectInfo]:
        entries = await asyncio.to_thread(self._scan, directory, name_prefix)
        for name, is_dir, info in entries:
            if is_dir:
                async for sub in self._walk(f"{directory}/{name}" if directory else name, ""):
                    yield sub
            elif info is not None:
                yield info

    def _scan(self, directory: str, name_prefix: str) -> _Entries:
        """One directory's entries in key order: a directory sorts as ``name/``, which is where its keys sort."""
        base = self.root.joinpath(*directory.split("/")) if directory else self.root
        try:
            with os.scandir(base) as it:
                raw = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
        except (FileNotFoundError, NotADirectoryError):
            return []
        out: _Entries = []
        for name, is_dir in sorted(raw, key=lambda item: item[0] + "/" if item[1] else item[0]):
            if name.startswith(".") or not name.startswith(name_prefix):
                continue
            if is_dir:
                out.append((name, True, None))
                continue
            key = f"{directory}/{name}" if directory else name
            path = base / name
            try:
                out.append((name, False, self._info(key, path, path.stat())))
            except FileNotFoundError:
                continue  # deleted while we listed
        return out

    async def ping(self) -> None:
        await asyncio.to_thread(self._ping)

    def _ping(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreUnavailable(f"Local store {self.root} cannot be created: {exc}.") from exc
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise StoreUnavailable(f"Local store {self.root} is not writable by this process.")

    async def close(self) -> None:
        return None


def _make_room(key: str, path: Path) -> None:
    """Create the folders above ``path``; refuse a key whose parent is an object, or that is a prefix of others."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise InvalidKey(key, "a parent of this key is already stored as an object") from exc
    if path.is_dir():
        raise InvalidKey(key, "other objects are stored under this key as a prefix")
