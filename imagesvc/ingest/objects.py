"""Object keys for masters, clean copies and public tiers, and idempotent writes of them.

Public keys carry 8 hex digits of the content's sha256, so they are immutable and cacheable forever; clean and master
keys are stable per page and are rewritten only when their bytes change.
"""

from __future__ import annotations

import hashlib

from imagesvc.storage import ObjectExists, ObjectStore

__all__ = ["clean_key", "illustration_slug", "master_key", "public_key", "write_if_changed", "write_immutable"]


def master_key(book_id: str, number: int, ext: str) -> str:
    return f"masters/{book_id}/{number}.{ext}"


def illustration_slug(illustration_id: str) -> str:
    """``<pageId>:<index>`` made safe for one path segment: ``<pageId>-<index>``."""
    return illustration_id.replace(":", "-")


def clean_key(book_id: str, number: int, tier: str, illustration_id: str | None = None) -> str:
    if illustration_id is not None:
        return f"clean/illus/{illustration_slug(illustration_id)}/{tier}.jpg"
    return f"clean/{book_id}/{number}/{tier}.jpg"


def public_key(book_id: str, number: int, tier: str, sha256: str, illustration_id: str | None = None) -> str:
    if illustration_id is not None:
        return f"pub/illus/{illustration_slug(illustration_id)}-{tier}-{sha256[:8]}.jpg"
    return f"pub/{book_id}/{number}-{tier}-{sha256[:8]}.jpg"


async def write_if_changed(store: ObjectStore, key: str, data: bytes, content_type: str) -> bool:
    """Store ``data`` at a stable key unless the same bytes are already there; returns whether it wrote."""
    info = await store.head(key)
    if info is not None and info.size == len(data) and info.etag == hashlib.md5(data).hexdigest():
        return False
    await store.put(key, data, content_type=content_type)
    return True


async def write_immutable(store: ObjectStore, key: str, data: bytes, content_type: str) -> bool:
    """Store a content-addressed object once; an existing one is left as it is. Returns whether it wrote."""
    if await store.head(key) is not None:
        return False
    try:
        await store.put(key, data, content_type=content_type, if_none_match=True)
    except ObjectExists:
        return False
    return True
