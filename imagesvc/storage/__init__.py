"""Object storage: the protocol every backend meets, its errors, and the factory that picks a backend by name.

Backends: ``local`` (a directory; the embedded default) and ``s3`` (any S3-compatible server, through aiobotocore).
Keys are ``/``-separated relative paths such as ``pub/<book>/<page>-display-<hash8>.jpg``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from imagesvc.errors import Conflict, InvalidRequest, NotFound, Unavailable

if TYPE_CHECKING:
    from imagesvc.settings import Settings

__all__ = [
    "BACKENDS",
    "CreatesBucket",
    "FileTransfers",
    "InvalidKey",
    "LocalFiles",
    "ObjectExists",
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectStore",
    "StoreUnavailable",
    "StoredObject",
    "Wrapper",
    "check_key",
    "file_transfers",
    "local_files",
    "make_store",
]

BACKENDS = ("local", "s3")


@dataclass(frozen=True)
class ObjectInfo:
    """What a HEAD or a listing tells about one object."""

    key: str
    size: int
    etag: str  # strong validator, without quotes
    content_type: str = "application/octet-stream"


@dataclass(frozen=True)
class StoredObject:
    """An object's bytes (the whole object, or the requested range) and its metadata."""

    info: ObjectInfo
    data: bytes


class ObjectNotFound(NotFound):
    def __init__(self, key: str) -> None:
        super().__init__(f"No object is stored at {key!r}.", details={"key": key})
        self.key = key


class ObjectExists(Conflict):
    """A conditional put (``if_none_match=True``) found the key already taken."""

    def __init__(self, key: str) -> None:
        super().__init__(f"An object is already stored at {key!r}.", details={"key": key})
        self.key = key


class StoreUnavailable(Unavailable):
    """The store cannot be reached, refuses our credentials, or keeps failing after bounded retries."""

    dependency = "object store"


class InvalidKey(InvalidRequest):
    """A key every backend refuses alike (so that code tested on ``local`` behaves the same on ``s3``)."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"Invalid object key {key!r}: {reason}.", details={"key": key})
        self.key = key


def check_key(key: str) -> str:
    """Return ``key`` if it is a valid object key, else raise ``InvalidKey``.

    Valid: 1 to 1024 UTF-8 bytes, ``/``-separated, no empty segment (so no leading, trailing or doubled ``/``),
    no segment starting with ``.`` (so no ``.``/``..`` and room for the local backend's hidden temp and sidecar
    files), no control characters.
    """
    if not key or len(key.encode("utf-8", "surrogatepass")) > 1024:
        raise InvalidKey(key, "a key has 1 to 1024 bytes")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in key):
        raise InvalidKey(key, "control characters are not allowed")
    for segment in key.split("/"):
        if not segment:
            raise InvalidKey(key, "empty path segment (leading, trailing or doubled '/')")
        if segment.startswith("."):
            raise InvalidKey(key, "a path segment may not start with '.'")
    return key


@runtime_checkable
class ObjectStore(Protocol):
    """The storage contract. Every method may raise ``StoreUnavailable``; methods taking a key raise ``InvalidKey``."""

    name: str

    async def put(
        self, key: str, data: bytes, *, content_type: str = "application/octet-stream", if_none_match: bool = False
    ) -> ObjectInfo:
        """Store ``data`` at ``key`` atomically (readers see the old object or the new, never a part).

        With ``if_none_match`` the write happens only if the key is free, else ``ObjectExists``.
        """
        ...

    async def get(self, key: str, *, byte_range: tuple[int, int] | None = None) -> StoredObject:
        """Read an object, or the inclusive ``byte_range`` of it. Raises ``ObjectNotFound``.

        With a range, ``data`` holds bytes ``start..min(end, size - 1)`` and ``info.size`` is the whole object's size
        (what a ``Content-Range`` header needs); a range starting at or past the end raises ``InvalidRequest``.
        """
        ...

    async def head(self, key: str) -> ObjectInfo | None:
        """Metadata of ``key``, or ``None`` when there is no such object."""
        ...

    async def delete(self, key: str) -> None:
        """Remove ``key``; removing a missing key is not an error."""
        ...

    def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, in key order.

        S3 listings carry no content type: the ``s3`` backend reports the default there; use ``head`` for it.
        """
        ...

    async def ping(self) -> None:
        """Check that the store answers and accepts our credentials; raise ``StoreUnavailable`` if not."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


@runtime_checkable
class LocalFiles(Protocol):
    """A store whose objects are files on this machine (the ``local`` backend): ``/img/`` serves them from disk."""

    def path_for(self, key: str) -> Path:
        """The file of ``key`` (which need not exist); ``ValueError`` for a key that is not a valid object key."""
        ...

    async def sweep_temp(self, older_than: float = 600.0) -> int:
        """Remove temporary files of writes older than ``older_than`` seconds (a writer killed mid-put)."""
        ...


@runtime_checkable
class CreatesBucket(Protocol):
    """A store that can create its bucket when it is missing (the ``s3`` backend, before the first ingest)."""

    async def ensure_bucket(self) -> None: ...


@runtime_checkable
class FileTransfers(Protocol):
    """A store that moves whole files between itself and local disk in bounded memory (both backends): what is
    larger than memory should hold (catalog snapshots, search indexes) never passes through ``put``/``get``."""

    async def put_file(self, key: str, path: Path, *, content_type: str = "application/octet-stream") -> ObjectInfo:
        """Store the file at ``path`` as ``key`` (atomically, as ``put``), reading it a part at a time."""
        ...

    async def get_file(self, key: str, path: Path) -> tuple[int, str]:
        """Write object ``key`` to the new file ``path`` a chunk at a time; returns its size and sha256 (hex).
        Raises ``ObjectNotFound``; a failed copy leaves no file at ``path``."""
        ...


@runtime_checkable
class Wrapper(Protocol):
    """A store in front of another (``inner``) that adds behaviour to the ``ObjectStore`` calls and nothing else."""

    inner: ObjectStore


def local_files(store: ObjectStore) -> LocalFiles | None:
    """The backend behind ``store`` (through any wrappers) when its objects are local files; None otherwise."""
    while not isinstance(store, LocalFiles) and isinstance(store, Wrapper):
        store = store.inner
    return store if isinstance(store, LocalFiles) else None


def file_transfers(store: ObjectStore) -> FileTransfers:
    """The backend behind ``store`` (through any wrappers), for whole-file transfers in bounded memory."""
    while not isinstance(store, FileTransfers) and isinstance(store, Wrapper):
        store = store.inner
    if not isinstance(store, FileTransfers):
        raise TypeError(f"the {store.name!r} store cannot move files in bounded memory")
    return store


def make_store(settings: Settings) -> ObjectStore:
    """Build the backend named by ``settings.storage`` (validated when settings load)."""
    if settings.storage == "local":
        from imagesvc.storage.local import LocalStore

        return LocalStore(settings.data_dir / "store")
    if settings.storage == "s3":
        from imagesvc.storage.s3 import S3Config, S3Store

        return S3Store(
            S3Config(
                endpoint_url=settings.s3_endpoint,
                bucket=settings.s3_bucket,
                region=settings.s3_region,
                access_key=settings.s3_access_key,
                secret_key=settings.s3_secret_key,
            )
        )
    raise ValueError(f"unknown storage backend {settings.storage!r}; valid: {', '.join(BACKENDS)}")
