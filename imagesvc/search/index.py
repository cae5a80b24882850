"""``imagesvc index``: embed every live illustration with CLIP, incrementally, and publish the vector index atomically.

Only illustrations that are new, or whose content hash changed, are embedded; vectors of the others are carried over
unchanged, and those of removed illustrations are dropped. A different model or weights re-embeds everything.
Images are read from the stored clean thumbnail tier; reads, decoding (over every core, or on the GPU) and the model
overlap in ``imagesvc.search.embedding_pipeline``.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import multiprocessing
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from PIL import Image

from imagesvc.catalog.schema import SCHEMA_VERSION
from imagesvc.errors import InvalidRequest
from imagesvc.imaging import TIERS
from imagesvc.search.clip import Encoder
from imagesvc.search.embedding_pipeline import Plan, embed_images, plan_for
from imagesvc.search.vectors import VectorIndex, load_index, save_index

__all__ = ["IndexSummary", "decode_for_clip", "run_index"]

log = logging.getLogger("imagesvc.search.index")
SOURCE_TIERS = TIERS[::-1]  # the smallest stored tier that exists is decoded


@dataclass
class IndexSummary:
    version: int
    vectors: int
    embedded: int
    kept: int
    dropped: int
    failed: int
    seconds: float
    model: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        rate = self.embedded / self.seconds if self.seconds else 0.0
        return (
            f"index v{self.version}: {self.vectors} vectors ({self.embedded} embedded, {self.kept} kept, "
            f"{self.dropped} dropped, {self.failed} failed) in {self.seconds:.1f}s ({rate:.0f} images/s), {self.model}"
        )


def decode_for_clip(data: bytes, size: int) -> Image.Image:
    """RGB image decoded at no less than ``size`` on its short side where the format allows a cheap reduction."""
    img = Image.open(io.BytesIO(data))
    img.draft("RGB", (size, size))  # JPEG: DCT-domain downscale, far cheaper than a full decode and resize
    return img.convert("RGB")


def _live_illustrations(catalog: Any) -> list[dict[str, Any]]:
    return catalog.query_all(
        "SELECT i.id, i.content_sha256 FROM illustrations i JOIN books b ON b.id = i.book_id"
        " WHERE i.removed = 0 AND b.withdrawn = 0 ORDER BY i.book_id, i.page_number, i.idx"
    )


async def run_index(
    settings: Any, catalog: Any, store: Any, encoder: Encoder | None, *, progress: bool = False, full: bool = False
) -> IndexSummary:
    """Bring the vector index up to date with the catalog; ``full`` re-embeds everything.

    Raises ``InvalidRequest`` when CLIP is off (no weights configured). An image that cannot be read or decoded is
    counted as failed and left out (the next run tries it again).
    """
    if encoder is None:
        raise InvalidRequest(
            "CLIP is off: no weights are configured, so there is nothing to index with.",
            recovery=["Set IMAGESVC_CLIP_WEIGHTS to a weights file or local-dir:DIR (docs/search.md)."],
        )
    started = time.perf_counter()
    await asyncio.to_thread(encoder.load)
    old = load_index(settings.data_dir)
    if old is not None and (old.model_key != encoder.spec.key or full):
        old = None
    rows = _live_illustrations(catalog)
    previous = {iid: (h, n) for n, (iid, h) in enumerate(zip(old.ids, old.hashes, strict=True))} if old else {}
    todo = [r for r in rows if r["id"] not in previous or previous[r["id"]][0] != (r["content_sha256"] or "")]
    tiers = catalog.renditions(r["id"] for r in todo)
    bar = _progress(len(todo), progress)

    async def read(iid: str) -> bytes | None:
        return await _read(store, tiers.get(iid, {}))

    plan = plan_for(encoder.device, settings.clip_batch, settings.workers)
    with _decode_pool(plan) as pool:
        fresh, failed = await embed_images([r["id"] for r in todo], read, encoder, plan, pool, on_progress=bar.update)
    bar.close()
    out_ids: list[str] = []
    out_hashes: list[str] = []
    out_rows: list[np.ndarray] = []
    kept = 0
    for r in rows:
        iid = r["id"]
        if iid in fresh:
            out_rows.append(fresh[iid])
        elif iid in previous and old is not None:
            out_rows.append(old.embeddings[previous[iid][1]])
            kept += 1
        else:
            continue
        out_ids.append(iid)
        out_hashes.append(r["content_sha256"] or "")
    dims = encoder.dims or (old.dims if old else 0)
    matrix = np.stack(out_rows).astype(np.float32) if out_rows else np.zeros((0, dims), np.float32)
    live = {r["id"] for r in rows}
    dropped = sum(1 for iid in previous if iid not in live)
    index = VectorIndex(out_ids, out_hashes, matrix, encoder.spec.key)
    if old is not None and not fresh and not dropped and out_ids == old.ids:
        version = old.version  # nothing changed: the same files, so the published index stays the same too
    else:
        version = await asyncio.to_thread(save_index, settings.data_dir, index, SCHEMA_VERSION)
    summary = IndexSummary(
        version, len(out_ids), len(fresh), kept, dropped, failed, time.perf_counter() - started, encoder.spec.key
    )
    log.info("%s", summary.line())
    return summary


async def _read(store: Any, tiers: dict[str, dict[str, Any]]) -> bytes | None:
    for tier in SOURCE_TIERS:
        if tier in tiers:
            try:
                return (await store.get(tiers[tier]["clean_key"])).data
            except Exception as exc:  # a missing or unreadable object is one failed image, not a failed job
                log.warning("cannot read %s: %s", tiers[tier]["clean_key"], exc)
                return None
    return None


@contextlib.contextmanager
def _decode_pool(plan: Plan) -> Iterator[ProcessPoolExecutor | None]:
    """Decoder processes for CPU decoding (none when the GPU decodes); spawned, so no torch state is forked."""
    if plan.gpu_decode:
        yield None
        return
    pool = ProcessPoolExecutor(plan.decoders, mp_context=multiprocessing.get_context("spawn"))
    try:
        yield pool
    finally:
        pool.shutdown(cancel_futures=True)


def _progress(total: int, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, unit="img", desc="index", disable=not enabled or total == 0)
