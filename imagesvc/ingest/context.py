"""The state one ingest run shares across its page jobs, and the gate every page passes to reach the pool."""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagesvc.catalog import Catalog
from imagesvc.imaging import MarkSpec, TierSpec
from imagesvc.ingest.budget import MemoryBudget, estimate_cost
from imagesvc.ingest.work import IngestSummary, Refusal, render_file
from imagesvc.provenance.ingest import Provenance
from imagesvc.storage import ObjectStore

__all__ = ["IngestContext"]


@dataclass
class IngestContext:
    """What every page job of one run shares: settings, catalog, store, pool, spec, summary, and the limits."""

    settings: Any
    catalog: Catalog
    store: ObjectStore
    pool: Executor
    spec: TierSpec
    summary: IngestSummary
    bar: Any
    slots: asyncio.Semaphore
    budget: MemoryBudget

    async def render(
        self,
        path: Path,
        mark: MarkSpec,
        bboxes: list[tuple[float, float, float, float]],
        provenance: Provenance | None = None,
    ):
        """Derive one page in the pool once its estimated memory fits the budget; a ``Refusal`` when it never can."""
        cost = await asyncio.to_thread(estimate_cost, path)
        if not self.budget.fits_alone(cost):
            return Refusal(
                "too_large",
                f"deriving its tiers needs about {cost / 2**30:.1f} GiB, more than the ingest memory budget of "
                f"{self.budget.total / 2**30:.1f} GiB (IMAGESVC_INGEST_MEMORY_BYTES)",
            )
        await self.budget.acquire(cost)
        try:
            async with self.slots:
                loop = asyncio.get_running_loop()
                return await loop.run_in_executor(
                    self.pool, render_file, str(path), self.spec, mark, bboxes, provenance
                )
        finally:
            await self.budget.release(cost)
