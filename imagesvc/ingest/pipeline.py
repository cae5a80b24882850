"""Ingest: manifest -> stored masters, clean and marked tiers, hashes -> catalog rows, one transaction per book.

Idempotent and resumable: a book whose manifest entry, master bytes and derivation settings are unchanged is skipped
whole; a page whose pixels inputs are unchanged reuses its stored renditions; objects are written only when their bytes
differ (stable keys) or are absent (content-addressed keys), so a rerun after a kill at any point converges.
Pixel work runs in a process pool across cores; one book's work is ``book.BookJob``, a page's objects are written by
``objects.store_renditions``.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Executor
from typing import Any

from tqdm import tqdm

from imagesvc.catalog import Catalog
from imagesvc.catalog import writes as w
from imagesvc.imaging import TierSpec
from imagesvc.ingest.book import DERIVATION_VERSION, BookJob
from imagesvc.ingest.budget import MemoryBudget, default_budget
from imagesvc.ingest.context import IngestContext
from imagesvc.ingest.manifest import Manifest
from imagesvc.ingest.work import IngestSummary, Refusal, digest, render_file
from imagesvc.storage import ObjectStore

__all__ = ["DERIVATION_VERSION", "IngestSummary", "Refusal", "digest", "ingest", "render_file", "tier_spec"]


def tier_spec(settings: Any) -> TierSpec:
    return TierSpec(
        display=settings.display_size,
        thumb=settings.thumb_size,
        quality=settings.jpeg_quality,
        max_pixels=settings.max_image_pixels,
        mark_min_side=settings.mark_min_side,
    )


async def ingest(
    manifest: Manifest,
    *,
    settings: Any,
    catalog: Catalog,
    store: ObjectStore,
    pool: Executor,
    progress: bool = True,
) -> IngestSummary:
    """Ingest every book and collection of a validated manifest; per-page image refusals are recorded, not raised."""
    started = time.monotonic()
    summary = IngestSummary()
    total = sum(len(b["pages"]) for b in manifest.books)
    with tqdm(total=total, unit="page", desc="ingest", disable=not progress, leave=False) as bar:
        ctx = IngestContext(
            settings=settings,
            catalog=catalog,
            store=store,
            pool=pool,
            spec=tier_spec(settings),
            summary=summary,
            bar=bar,
            slots=asyncio.Semaphore(max(2, settings.workers * 2)),
            budget=MemoryBudget(getattr(settings, "ingest_memory_bytes", 0) or default_budget()),
        )
        for book in manifest.books:
            await BookJob(book, manifest, ctx).run()
            summary.books += 1
    if manifest.collections:
        with catalog.transaction() as conn:
            w.replace_collections(conn, manifest.collections)
    summary.seconds = round(time.monotonic() - started, 3)
    return summary
