"""Hot immutable objects kept in memory in front of an object store, so that /image serves popular pages without a
store round trip.

Only public tiers are kept: keys under ``pub/`` whose file name ends in eight hex digits of the content's SHA-256
(``pub/<book>/<n>-<tier>-<sha8>.jpg``, ``pub/illus/<slug>-<tier>-<sha8>.jpg``: ingest/objects.py). Such a key never
changes its bytes, so nothing kept can go stale. Anything else (clean copies, masters, caches, a stray object under
``pub/`` without a hash in its name) is always read from the store. Entries are evicted least recently used first once
their bytes pass the bound; one object may take at most an eighth of it.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any

from imagesvc.storage import ObjectInfo, ObjectStore, StoredObject

__all__ = ["HotObjects", "is_immutable", "read_through"]

_IMMUTABLE = re.compile(r"pub/.+-[0-9a-f]{8}\.[a-z]+")


def is_immutable(key: str) -> bool:
    """Whether ``key`` names a public tier by its content hash, so that its bytes can never change."""
    return _IMMUTABLE.fullmatch(key) is not None


async def read_through(store: ObjectStore, key: str) -> StoredObject:
    """``key``'s object, taken from the hot cache when it is there but never added to it: for bulk reads (every page
    of a book once), which would otherwise push out the popular pages the cache is for."""
    if isinstance(store, HotObjects):
        return await store.get(key, keep=False)
    return await store.get(key)


class HotObjects:
    """An object store (``inner``) with an LRU of up to ``max_bytes`` of immutable objects (0: nothing is kept).

    It offers the ``ObjectStore`` protocol and nothing more (a ``storage.Wrapper``): the other calls go straight to
    ``inner``; backend-only features are reached with ``storage.local_files``. Not thread-safe: one event loop uses it.
    """

    def __init__(self, inner: ObjectStore, max_bytes: int) -> None:
        self.inner = inner
        self.max_bytes = max(0, max_bytes)
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[str, StoredObject] = OrderedDict()
        self._writes = 0  # puts and deletes so far: a read that overlapped one is not kept

    @property
    def name(self) -> str:
        return self.inner.name

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, key: str, *, byte_range: tuple[int, int] | None = None, keep: bool = True) -> StoredObject:
        """``key``'s object, from memory when kept; ``keep=False`` reads a missing one without keeping it."""
        if byte_range is not None or not self.max_bytes or not is_immutable(key):
            return await self.inner.get(key, byte_range=byte_range)
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            self.hits += 1
            return entry
        if not keep:
            return await self.inner.get(key)
        self.misses += 1
        writes = self._writes
        stored = await self.inner.get(key)
        if writes == self._writes:
            self._keep(key, stored)
        return stored

    def _keep(self, key: str, stored: StoredObject) -> None:
        size = len(stored.data)
        if size > self.max_bytes // 8 or key in self._entries:
            return
        self._entries[key] = stored
        self.bytes += size
        while self.bytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self.bytes -= len(evicted.data)

    def forget(self, key: str) -> None:
        """Drop ``key`` if it is kept (a delete, or a put that might replace it)."""
        self._writes += 1
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.bytes -= len(entry.data)

    async def put(self, key: str, data: bytes, **options: Any) -> Any:
        self.forget(key)
        return await self.inner.put(key, data, **options)

    async def delete(self, key: str) -> None:
        self.forget(key)
        await self.inner.delete(key)

    async def head(self, key: str) -> ObjectInfo | None:
        return await self.inner.head(key)

    def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        return self.inner.list(prefix)

    async def ping(self) -> None:
        await self.inner.ping()

    async def close(self) -> None:
        await self.inner.close()
