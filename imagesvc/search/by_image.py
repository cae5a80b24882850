"""Search by image: the illustrations printed from the same woodblock or plate as an uploaded picture, and (with CLIP)
the ones that look like it.

Two stages. The window hashes of the query (whole, and inner crops) are compared with every stored window hash
(``blocks.py``); each illustration's three closest pairs also say how the two pictures may line up. Candidates whose
closest pair is within ``SAME_BLOCK_BITS`` are then read back (their clean thumbnail) and verified by correlating
the aligned windows; those at least ``SAME_BLOCK_CORRELATION`` alike are the same block, best first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from imagesvc.search.block_index import BlockIndex, read_thumb, sync_blocks
from imagesvc.search.blocks import (
    SAME_BLOCK_BITS,
    SAME_BLOCK_CORRELATION,
    best_pairs,
    correlation,
    query_boxes,
    stored_boxes,
    window_hashes,
)

__all__ = ["BlockMatch", "ImageMatcher", "matcher_for"]

log = logging.getLogger("imagesvc.search.by_image")
CANDIDATES = 40  # verified at most per query (each costs one thumbnail read and ~20 ms of correlation)
CLEAR_MATCH = 0.9
QUERY_SIDE = 400  # the query is reduced to this longest side before hashing (stored thumbnails are 300 px)


@dataclass(frozen=True)
class BlockMatch:
    id: str
    distance: int  # bits between the closest window pair, of 64
    correlation: float  # of the aligned windows, 1.0 identical


def matcher_for(services: Any) -> ImageMatcher:
    """The matcher riding on the search engine of ``services`` (made on first use)."""
    from imagesvc.search.engine import engine_for

    engine = engine_for(services)
    matcher = getattr(engine, "matcher", None)
    if matcher is None:
        matcher = engine.matcher = ImageMatcher(services)
    return matcher


class ImageMatcher:
    def __init__(self, services: Any) -> None:
        self.services = services
        self._index: BlockIndex | None = None
        self._stamp: Any = None
        self._job: asyncio.Future[Any] | None = None
        self._boxes = stored_boxes()
        self._query_boxes = query_boxes()

    def state(self) -> str:
        if self._index is not None:
            return f"ready: {len(self._index.ids)} illustrations hashed"
        return "building the window hashes" if self._job is not None else "hashes load on the first search by image"

    async def ready(self) -> BlockIndex | None:
        """The block index, brought up to date first (hashing new illustrations); waits at most the search wait
        setting, then answers with what is there while the work goes on."""
        catalog = self.services.catalog
        stamp = catalog.query_one("PRAGMA data_version")
        if self._index is not None and self._stamp == stamp:
            return self._index
        if self._job is None or self._job.done():
            self._job = asyncio.ensure_future(self._sync(stamp))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._job), self.services.settings.search_wait)
        return self._index

    async def _sync(self, stamp: Any) -> None:
        data_dir = getattr(self.services.search, "_data_dir", self.services.settings.data_dir)
        try:
            index, _ = await sync_blocks(data_dir, self.services.catalog, self.services.store)
        except FileNotFoundError:
            if Path(data_dir).is_dir():
                raise
            return  # the snapshot folder it was for was replaced and removed meanwhile: stale work, dropped
        self._index, self._stamp = index, stamp

    async def same_block(self, image: Image.Image, live: set[str] | None = None) -> list[BlockMatch]:
        """The illustrations printed from the same block as ``image``, best first (``live``: only these ids)."""
        index = await self.ready()
        if index is None or not index.ids:
            return []
        small = image.copy()
        small.thumbnail((QUERY_SIDE, QUERY_SIDE))
        query = await asyncio.to_thread(window_hashes, small, self._query_boxes)
        dist, qwin, srow = await asyncio.to_thread(best_pairs, query, index.hashes, index.owner, len(index.ids))
        order = [int(n) for n in np.argsort(dist[:, 0], kind="stable") if dist[n, 0] <= SAME_BLOCK_BITS]
        if live is not None:
            order = [n for n in order if index.ids[n] in live]
        order = order[:CANDIDATES]
        tiers = self.services.catalog.renditions(index.ids[n] for n in order)
        out = []
        for n in order:
            iid = index.ids[n]
            stored = await read_thumb(self.services.store, tiers.get(iid, {}))
            if stored is None:
                continue
            pairs = [
                (self._query_boxes[int(qwin[n, k])], self._boxes[int(srow[n, k]) - n * index.windows])
                for k in range(srow.shape[1])
                if srow[n, k] >= 0
            ]
            score = await asyncio.to_thread(_verify, small, stored, pairs)
            if score >= SAME_BLOCK_CORRELATION:
                out.append(BlockMatch(iid, int(dist[n, 0]), round(score, 4)))
        out.sort(key=lambda m: (-m.correlation, m.distance))
        return out


def _verify(query: Image.Image, stored: Image.Image, pairs: list[tuple[Any, Any]]) -> float:
    best = -1.0
    for qbox, sbox in pairs:  # closest pair first; a clear match needs no second look
        best = max(best, correlation(query, qbox, stored, sbox))
        if best >= CLEAR_MATCH:
            break
    return best


async def warm_up(services: Any) -> None:
    """Load the text model and bring the text and block indexes up to date now, not on the first searches (called
    by ``imagesvc serve`` at startup, in the background; failures are logged, searches then say what is missing)."""
    from imagesvc.search.engine import engine_for

    engine = engine_for(services)
    try:
        if engine.text_model is not None:
            while not await engine.dense_ready() and engine.text_model_state().startswith("loading"):
                await asyncio.sleep(1)  # dense_ready waits search_wait seconds at a time; the job goes on
        matcher = matcher_for(services)
        while await matcher.ready() is None and matcher._job is not None and not matcher._job.done():
            await asyncio.sleep(1)
    except Exception:
        log.exception("search warm-up failed; searches will say which signals are missing")
