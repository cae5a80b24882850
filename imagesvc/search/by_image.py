"""Search by image: the illustrations printed from the same woodblock or plate as an uploaded picture.

The query's ORB features (``features.py``) are looked up in the local-feature index made by ``imagesvc index``
(``block_index.py``), the best-voted illustrations verified geometrically (``feature_index.py``) and held to the
rules of ``printings.py``, with the parameters of ``match_params.py``. The index is loaded off the event loop, and
again only when ``imagesvc index`` has published a new one; a node never builds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from imagesvc.errors import Unavailable
from imagesvc.search.block_index import BlockIndex, current_digest, load_blocks
from imagesvc.search.feature_index import Candidate
from imagesvc.search.features import extract_query
from imagesvc.search.index_follower import Follower
from imagesvc.search.published import FETCH_ERRORS, IndexCorrupt
from imagesvc.search.threads import off_loop

__all__ = ["BlockMatch", "ImageMatcher", "Printings", "match_picture", "match_printings", "matcher_for"]

log = logging.getLogger("imagesvc.search.by_image")
CONFIDENT_INLIERS = 60  # inliers at which ``correlation`` (the match score) reaches 1.0


@dataclass(frozen=True)
class BlockMatch:
    id: str
    inliers: int  # query-to-stored keypoint pairs that agree with one similarity transform
    pairs: int  # pairs the descriptor search proposed
    correlation: float  # match score in [0, 1]: min(1, inliers / CONFIDENT_INLIERS)

    @property
    def distance(self) -> int:
        """Pairs proposed but not geometrically consistent (0: every proposed pair agreed)."""
        return self.pairs - self.inliers


# Runs a blocking function off the event loop and awaits its result (tools/image_work.ImageWork.run).
Runner = Callable[..., Awaitable[Any]]


def matcher_for(services: Any) -> ImageMatcher:
    """The matcher riding on the search engine of ``services`` (made on first use)."""
    from imagesvc.search.engine import engine_for

    engine = engine_for(services)
    matcher = getattr(engine, "matcher", None)
    if matcher is None:
        matcher = engine.matcher = ImageMatcher(services, getattr(engine, "followers", {}).get("blocks"))
    return matcher


@dataclass(frozen=True)
class Printings:
    """``same_block``: printed from the query's block, best first; ``possible``: verified candidates that no rule
    calls the same block (a recut copy, a partial fit), best first: shown apart, for a person to judge."""

    same_block: list[BlockMatch]
    possible: list[BlockMatch]


def match_printings(index: BlockIndex, image: Image.Image, live: set[str] | None = None) -> Printings:
    """Blocking: the illustrations of ``index`` printed from the same block as ``image``, and the possible ones."""
    query = extract_query(image, index.features.params)
    allowed = None
    if live is not None:
        allowed = np.fromiter((iid in live for iid in index.ids), bool, len(index.ids))
    answer = index.features.match(query, allowed)
    return Printings(_matches(index, answer.same_block), _matches(index, answer.possible))


def match_picture(index: BlockIndex, image: Image.Image, live: set[str] | None = None) -> list[BlockMatch]:
    """Blocking: the illustrations of ``index`` printed from the same block as ``image``, best first."""
    return match_printings(index, image, live).same_block


def _matches(index: BlockIndex, found: list[Candidate]) -> list[BlockMatch]:
    return [
        BlockMatch(index.ids[c.number], c.inliers, c.pairs, round(min(1.0, c.inliers / CONFIDENT_INLIERS), 4))
        for c in found
    ]


class ImageMatcher:
    def __init__(self, services: Any, follower: Follower | None = None) -> None:
        self.services = services
        self.follower = follower  # the published block index (``published.py``), when the node follows one
        self._index: BlockIndex | None = None
        self._job: asyncio.Future[Any] | None = None
        self._failed: str | None = None  # the digest of a local index that would not load: not tried again
        self._failed_why = ""  # why the last index tried (local or published) is not in service
        self.loads = 0  # indexes loaded into service

    @property
    def _data_dir(self) -> Path:
        return Path(getattr(self.services.search, "_data_dir", self.services.settings.data_dir))

    def state(self) -> str:
        if self._index is not None:
            return f"ready: {len(self._index.ids)} illustrations, {self._index.features.descriptors} features"
        if self._job is not None and not self._job.done():
            return "loading the feature index"
        if self._failed_why:  # an index of other descriptors than this version's, say, after an upgrade
            return f"no feature index: {self._failed_why}"
        return "no feature index: run `imagesvc index`"

    async def ready(self) -> BlockIndex | None:
        """The current feature index, (re)loaded off the event loop when ``imagesvc index`` published a new one;
        waits at most the search wait setting, then answers with what is loaded while the load goes on."""
        if self.follower is not None and not self.follower.local():
            return await self._ready_published(self.follower)
        digest = await off_loop(current_digest, self._data_dir)
        if digest is None or digest == self._failed or (self._index is not None and self._index.digest == digest):
            return self._index
        if self._job is None or self._job.done():
            self._job = asyncio.ensure_future(off_loop(self._load, digest))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._job), self.services.settings.search_wait)
        return self._index

    async def _ready_published(self, follower: Follower) -> BlockIndex | None:
        """As ``ready``, for the index the catalog names (fetched, verified and loaded off the event loop)."""
        row = await follower.current_row()
        if row is None or not follower.wanted(row):
            return self._index
        if self._job is None or self._job.done():
            self._job = asyncio.ensure_future(self._load_published(follower, row))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._job), self.services.settings.search_wait)
        return self._index

    async def _load_published(self, follower: Follower, row: dict[str, Any]) -> None:
        try:
            folder = await follower.fetch(row)
            index = await off_loop(load_blocks, folder)
            if index is None:
                raise IndexCorrupt(f"the published block index in {folder} has no current.json")
        except FETCH_ERRORS as exc:  # keep the index in service
            follower.refuse(row, exc)
            self._failed_why = f"the published index {row.get('digest')} was refused ({exc})"
            return
        self._index = index
        self.loads += 1
        await off_loop(follower.loaded, row)
        log.info("search by image: %s", self.state())

    def _load(self, digest: str) -> None:
        """Load the index the data dir names; one that will not load (cut short, altered, swapped away while it was
        read) is logged and remembered, and the index in service stays (searches never see the error)."""
        try:
            index = load_blocks(self._data_dir)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:  # faiss reports a bad file as RuntimeError
            self._failed, self._failed_why = digest, f"{digest} would not load ({exc})"
            log.error("search by image: feature index %s would not load (%s: %s); still %s", digest,
                      type(exc).__name__, exc, self.state())  # fmt: skip
            return
        if index is not None:
            self._index = index
            self.loads += 1
            log.info("search by image: %s", self.state())

    async def same_block(
        self, image: Image.Image, live: set[str] | None = None, *, run: Runner | None = None
    ) -> list[BlockMatch]:
        """The illustrations printed from the same block as ``image``, best first (``live``: only these ids).
        ``run`` runs the blocking match off the event loop (the caller's own pool; default: a thread)."""
        return (await self.printings(image, live, run=run)).same_block

    async def printings(
        self, image: Image.Image, live: set[str] | None = None, *, run: Runner | None = None
    ) -> Printings:
        """``same_block``'s answer with the possible printings beside it (``match_printings``)."""
        index = await self.ready()
        if index is None or not index.ids:
            return Printings([], [])
        if run is None:
            return await off_loop(match_printings, index, image, live)
        return await run(match_printings, index, image, live)


WARM_QUERY = "an alembik over the furnace"  # a text query whose misspelt word takes the spelling path too


def warm_picture() -> Image.Image:
    """A seeded noise picture with corners to describe: what the warm-up searches by image with."""
    rng = np.random.default_rng(0)
    cells = rng.integers(0, 2, (24, 24), dtype=np.uint8) * 255
    return Image.fromarray(np.kron(cells, np.ones((16, 16), np.uint8))).convert("RGB")


async def warm_up(services: Any) -> None:
    """Load and warm now, not on the first searches, everything a search needs: the search snapshot (gallery table
    and CLIP's vectors), the text model, the text index and its lexicons, the spelling vocabulary and dictionary,
    the block index and CLIP's encoder; then one text search and one search by image run end to end, so that the
    first real ones find every lazy part made (called by ``imagesvc serve`` at startup, in the background; failures
    are logged, searches then say what is missing)."""
    from imagesvc.search.engine import engine_for

    engine = engine_for(services)
    waited = False
    while True:
        try:
            await _warm(services, engine)
            return
        except Unavailable as exc:  # the catalog is down or hung: warm up once it answers (readiness waits)
            if not waited:
                log.warning("search warm-up waits for a dependency: %s", exc.message)
                waited = True
            await asyncio.sleep(1)
        except Exception:
            log.exception("search warm-up failed; searches will say which signals are missing")
            return


async def _warm(services: Any, engine: Any) -> None:
    """One pass of the warm-up (``warm_up`` retries it while the catalog does not answer)."""
    from imagesvc.search.ranking import Query

    await engine.snapshot()
    model = engine.text_model
    if model is not None:
        while not await engine.dense_ready() and engine.text_model_state().startswith("loading"):
            await asyncio.sleep(1)  # dense_ready waits search_wait seconds at a time; the job goes on
        if model.glossed and model.info is not None:
            from imagesvc.search.glosses import glossary

            await off_loop(glossary().load, model.glossed)
        await off_loop(model.is_common_word, "furnace")  # the spelling dictionary (~0.3 s)
    await engine.search(Query(text=WARM_QUERY))  # keyword, dense and CLIP text encode; the vocabulary
    matcher = matcher_for(services)
    while await matcher.ready() is None and matcher._job is not None and not matcher._job.done():
        await asyncio.sleep(1)
    picture = warm_picture()
    snap = await engine.snapshot()
    await matcher.same_block(picture, set(snap.table.ids[:1]))
    if snap.matrix is not None and engine.encoder is not None:
        await off_loop(engine.encoder.encode_images, [picture])
