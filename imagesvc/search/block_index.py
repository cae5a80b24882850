"""The window-hash index behind search by image, kept like the vector indexes: incremental and swapped atomically.

``DATA_DIR/blockhashes/blocks.npz`` holds, per live illustration, the pHashes of its windows (``blocks.py``),
computed from the stored clean thumbnail. Only illustrations that are new or whose content hash changed are hashed
again; a reader sees the old file or the new one, never half of either.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from imagesvc.imaging import TIERS
from imagesvc.search.blocks import stored_boxes, window_hashes

__all__ = ["BlockIndex", "BlockIndexSummary", "load_blocks", "read_thumb", "sync_blocks"]

log = logging.getLogger("imagesvc.search.blocks")
FOLDER, FILE = "blockhashes", "blocks.npz"
SOURCE_TIERS = TIERS[::-1]  # the smallest stored clean tier is hashed


@dataclass
class BlockIndex:
    """``hashes[i]`` is a window hash of illustration ``ids[owner[i]]``, whose content hash is ``content[owner[i]]``."""

    ids: list[str]
    content: list[str]
    hashes: np.ndarray  # uint64
    owner: np.ndarray  # int64
    windows: int  # hashes per illustration (the same window boxes for every one)


@dataclass
class BlockIndexSummary:
    illustrations: int
    hashed: int
    kept: int
    failed: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        return (
            f"block hashes: {self.illustrations} illustrations ({self.hashed} hashed, {self.kept} kept, "
            f"{self.failed} failed) in {self.seconds:.1f}s"
        )


def load_blocks(data_dir: Path) -> BlockIndex | None:
    path = Path(data_dir) / FOLDER / FILE
    try:
        with np.load(path, allow_pickle=False) as data:
            ids, content = data["ids"].tolist(), data["content"].tolist()
            hashes, windows = data["hashes"].astype(np.uint64), int(data["windows"])
    except FileNotFoundError:
        return None
    owner = np.repeat(np.arange(len(ids), dtype=np.int64), windows)
    return BlockIndex(ids, content, hashes, owner, windows)


def _save(data_dir: Path, index: BlockIndex) -> None:
    folder = Path(data_dir) / FOLDER
    folder.mkdir(exist_ok=True)  # never the data dir itself: a snapshot folder removed under a writer stays removed
    tmp = folder / f".{FILE}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        np.savez(
            f,
            ids=np.array(index.ids, dtype=str),
            content=np.array(index.content, dtype=str),
            hashes=index.hashes,
            windows=np.array(index.windows),
        )
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / FILE)


async def read_thumb(store: Any, tiers: dict[str, dict[str, Any]]) -> Image.Image | None:
    """The smallest stored clean tier of one illustration, decoded (``None`` when it cannot be read)."""
    for tier in SOURCE_TIERS:
        if tier in tiers:
            try:
                data = (await store.get(tiers[tier]["clean_key"])).data
                return await asyncio.to_thread(_decode, data)
            except Exception as exc:  # one unreadable object is one failed illustration, not a failed job
                log.warning("cannot read %s: %s", tiers[tier]["clean_key"], exc)
                return None
    return None


def _decode(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.draft("RGB", (400, 400))
    return image.convert("RGB")


async def sync_blocks(data_dir: Path, catalog: Any, store: Any, *, full: bool = False) -> tuple[BlockIndex, Any]:
    """Bring the block index up to date with the catalog's live illustrations; returns it and a summary."""
    started = time.perf_counter()
    rows = catalog.query_all(
        "SELECT i.id, i.content_sha256 FROM illustrations i JOIN books b ON b.id = i.book_id"
        " WHERE i.removed = 0 AND b.withdrawn = 0 ORDER BY i.book_id, i.page_number, i.idx"
    )
    boxes = stored_boxes()
    old = None if full else load_blocks(data_dir)
    if old is not None and old.windows != len(boxes):
        old = None
    previous = {iid: n for n, iid in enumerate(old.ids)} if old else {}
    wanted = [(r["id"], r["content_sha256"] or "") for r in rows]
    if old is not None and wanted == list(zip(old.ids, old.content, strict=True)):
        return old, BlockIndexSummary(len(wanted), 0, len(wanted), 0, time.perf_counter() - started)
    todo = [iid for iid, h in wanted if iid not in previous or old.content[previous[iid]] != h]  # type: ignore[union-attr]
    tiers = catalog.renditions(todo)
    fresh: dict[str, np.ndarray] = {}
    for iid in todo:
        image = await read_thumb(store, tiers.get(iid, {}))
        if image is not None:
            fresh[iid] = await asyncio.to_thread(window_hashes, image, boxes)
    ids, content, blocks = [], [], []
    for iid, h in wanted:
        if iid in fresh:
            blocks.append(fresh[iid])
        elif iid in previous and old is not None and iid not in todo:
            n = previous[iid]
            blocks.append(old.hashes[n * old.windows : (n + 1) * old.windows])
        else:
            continue
        ids.append(iid)
        content.append(h)
    hashes = np.concatenate(blocks) if blocks else np.zeros(0, np.uint64)
    index = BlockIndex(ids, content, hashes, np.repeat(np.arange(len(ids), dtype=np.int64), len(boxes)), len(boxes))
    try:
        await asyncio.to_thread(_save, data_dir, index)
    except OSError as exc:  # a read-only data dir: keep the index in memory
        log.warning("block hashes kept in memory only: %s", exc)
    kept = len(ids) - len(fresh)
    summary = BlockIndexSummary(len(ids), len(fresh), kept, len(todo) - len(fresh), time.perf_counter() - started)
    log.info("%s", summary.line())
    return index, summary
