"""Object keys for masters, clean copies and public tiers, and idempotent writes of them (a page's all at once).

Public keys carry 8 hex digits of the content's sha256, so they are immutable and cacheable forever; clean and master
keys are stable per page and are rewritten only when their bytes change.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from imagesvc.imaging import PageRenditions, Rendition
from imagesvc.ingest.work import IngestSummary
from imagesvc.storage import ObjectExists, ObjectStore

__all__ = [
    "FORMAT_EXT",
    "clean_key",
    "illustration_slug",
    "master_key",
    "public_key",
    "store_renditions",
    "write_if_changed",
    "write_immutable",
]

# File extension of a stored master, by the format Pillow read it as.
FORMAT_EXT = {"JPEG": "jpg", "MPO": "jpg", "PNG": "png", "TIFF": "tif", "WEBP": "webp", "GIF": "gif", "BMP": "bmp"}


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


async def store_renditions(
    store: ObjectStore,
    summary: IngestSummary,
    book_id: str,
    pid: str,
    number: int,
    master: bytes,
    result: PageRenditions,
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Write a freshly derived page's master, clean and public tiers (its illustrations' too); return the rendition
    rows by owner and the illustrations' hashes. Objects already holding the same bytes are not written again."""
    ext = FORMAT_EXT.get(result.master_format, "bin")
    writes = [write_if_changed(store, master_key(book_id, number, ext), master, "application/octet-stream")]
    renditions: dict[str, dict[str, Any]] = {pid: {}}
    hashes: dict[str, dict[str, Any]] = {}

    def add(owner: str, clean: dict[str, Rendition], public: dict[str, Rendition], iid: str | None) -> None:
        for tier, c in clean.items():
            p = public[tier]
            ck = clean_key(book_id, number, tier, iid)
            pk = public_key(book_id, number, tier, p.sha256, iid)
            writes.append(write_if_changed(store, ck, c.data, c.content_type))
            writes.append(write_immutable(store, pk, p.data, p.content_type))
            renditions[owner][tier] = {
                "clean_key": ck,
                "public_key": pk,
                "width": p.width,
                "height": p.height,
                "bytes": len(p.data),
                "sha256": p.sha256,
                "clean_bytes": len(c.data),
                "clean_sha256": c.sha256,
                "clean_width": c.width,
                "clean_height": c.height,
            }

    add(pid, result.clean, result.public, None)
    for ill in result.illustrations:
        iid = f"{pid}:{ill.index}"
        renditions[iid] = {}
        add(iid, ill.clean, ill.public, iid)
        hashes[iid] = {"phash": ill.phash, "dhash": ill.dhash, "content_sha256": ill.clean["full"].sha256}
    written = sum(await asyncio.gather(*writes))
    summary.objects_written += written  # read only after the writes: `x += await ...` would lose counts
    return renditions, hashes
