"""``imagesvc marks rebake``: redraw the visible marks of stored books from their clean copies.

Used after the site name, the site URL or the mark style changes. The public tiers of each page and illustration are
re-marked from their clean tiers in a process pool (one placement, planned on the clean display tier), stored under
their new content-addressed keys, and the catalog rows of a book switch in one transaction; public objects no longer
referenced are deleted only after that commit. Masters are not read. Resumable: a page whose derivation digest
already names these settings and this mark style is skipped, so a rerun after a stop goes on where it stopped (to
the book).
"""

from __future__ import annotations

import asyncio
import hashlib
import io
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from PIL import Image

from imagesvc.catalog import Catalog
from imagesvc.imaging import MarkSpec, TierSpec
from imagesvc.imaging.marks import rebake
from imagesvc.imaging.xmp import strip_c2pa
from imagesvc.ingest.objects import public_key, write_immutable
from imagesvc.ingest.pipeline import tier_spec
from imagesvc.ingest.work import page_derivation
from imagesvc.provenance.ingest import Provenance, rebake_provenance
from imagesvc.storage import ObjectStore

__all__ = ["RebakeSummary", "rebake_marks"]


@dataclass
class RebakeSummary:
    books: int = 0
    renditions: int = 0
    changed: int = 0
    skipped: int = 0  # pages already marked with these settings (an earlier run's, resumed)

    def line(self) -> str:
        return (
            f"{self.books} books, {self.renditions} renditions re-marked, {self.changed} changed,"
            f" {self.skipped} pages already done"
        )


async def _rebake_owner(
    store: ObjectStore,
    pool: Executor,
    rows: dict[str, dict[str, Any]],
    mark: MarkSpec,
    spec: TierSpec,
    native: int,
    provenance: Provenance | None = None,
) -> list[tuple[str, str, bytes, tuple[int, int]]]:
    """Re-mark every tier of one page or illustration from its clean tiers; (tier, sha256, bytes, size) each."""
    tiers = list(rows)
    cleans = await asyncio.gather(*(store.get(rows[tier]["clean_key"]) for tier in tiers))
    clean = {tier: found.data for tier, found in zip(tiers, cleans, strict=True)}
    loop = asyncio.get_running_loop()
    done = await loop.run_in_executor(pool, _rebake_call, clean, mark, spec, native, provenance)
    # Keys address the image without its C2PA manifest, as at ingest (imagesvc.provenance.sign.sign_page).
    return [(tier, hashlib.sha256(strip_c2pa(data)).hexdigest(), data, size) for tier, (data, size) in done.items()]


def _rebake_call(
    clean: dict[str, bytes], mark: MarkSpec, spec: TierSpec, native: int, provenance: Provenance | None
) -> dict[str, tuple[bytes, tuple[int, int]]]:
    marked = rebake(clean, mark, spec, native_longest_side=native)
    out = {}
    for tier, data in marked.items():
        if provenance is not None and data != clean[tier]:  # C2PA: a marked tier is signed again
            data = provenance.sign_tier(tier, data)
        with Image.open(io.BytesIO(data)) as img:  # the header only: a strip below the page changes the size
            out[tier] = (data, img.size)
    return out


async def _remark(
    gate: asyncio.Semaphore,
    store: ObjectStore,
    pool: Executor,
    book_id: str,
    number: int,
    iid: str | None,
    rows: dict[str, dict[str, Any]],
    mark: MarkSpec,
    spec: TierSpec,
    provenance: Provenance | None,
) -> list[tuple[tuple[str, str], str, str, tuple[int, tuple[int, int]], str]]:
    """Re-mark and store one page's or illustration's public tiers.

    Returns ``((owner, tier), key, sha256, (bytes, size), old key)`` per tier."""
    # The clean full tier holds the native size (the public one may carry a strip outside the page).
    full = rows["full"]
    native = max(full["clean_width"] or full["width"], full["clean_height"] or full["height"])
    async with gate:
        done = await _rebake_owner(store, pool, rows, mark, spec, native, provenance)
        out = []
        for tier, sha, data, size in done:
            key = public_key(book_id, number, tier, sha, iid)
            await write_immutable(store, key, data, "image/jpeg")
            out.append(((rows[tier]["owner"], tier), key, sha, (len(data), size), rows[tier]["public_key"]))
        return out


async def rebake_marks(
    *, settings: Any, catalog: Catalog, store: ObjectStore, pool: Executor, books: list[str] | None = None
) -> RebakeSummary:
    """Re-mark every page and illustration of ``books`` (ids or slugs; all live books when None)."""
    spec = tier_spec(settings)
    summary = RebakeSummary()
    gate = asyncio.Semaphore(2 * max(1, settings.workers))
    targets = [catalog.find_book(b) for b in books] if books else catalog.list_books(limit=10**9, offset=0)[0]
    for book in targets:
        if book is None:
            continue
        old_keys: set[str] = set()
        updates: list[tuple[str, str, str, str, int, tuple[int, int]]] = []  # owner, tier, key, sha, bytes, size
        derivations: list[tuple[str, str]] = []
        jobs = []
        illus_by_page: dict[str, list[dict[str, Any]]] = {}
        for ill in catalog.book_illustrations(book["id"]):
            illus_by_page.setdefault(ill["page_id"], []).append(ill)
        for page in catalog.pages(book["id"]):
            if page["image_unavailable"]:
                continue
            mark = MarkSpec(
                site=settings.site_name,
                citation_url=f"{settings.site_url}/book/{book['slug']}?page={page['number']}",
                institution=book["institution"],
                faint=settings.faint_mark,
            )
            illus = illus_by_page.get(page["id"], [])
            bboxes = [(i["bbox_x"], i["bbox_y"], i["bbox_w"], i["bbox_h"]) for i in illus]
            derivation = page_derivation(page["master_sha256"], spec, mark, bboxes)
            if page["derivation"] == derivation:  # done by an earlier run (or ingested with these settings)
                summary.skipped += 1
                continue
            provenance = rebake_provenance(settings, book, page)  # C2PA
            owners = [page["id"], *(i["id"] for i in illus)]
            tiers = catalog.renditions(owners)
            for owner in owners:
                iid = None if owner == page["id"] else owner
                jobs.append(
                    _remark(gate, store, pool, book["id"], page["number"], iid, tiers[owner], mark, spec, provenance)
                )
            derivations.append((derivation, page["id"]))
        for done in await asyncio.gather(*jobs):  # the pool's workers all busy, a bounded number of images held
            for owner_tier, key, sha, size, old in done:
                old_keys.add(old)
                summary.renditions += 1
                summary.changed += old != key
                updates.append((*owner_tier, key, sha, *size))
        with catalog.transaction() as conn:
            conn.executemany(
                "UPDATE renditions SET public_key = ?, sha256 = ?, bytes = ?, width = ?, height = ?"
                " WHERE owner = ? AND tier = ?",
                [(key, sha, n, w, h, owner, tier) for owner, tier, key, sha, n, (w, h) in updates],
            )
            conn.executemany("UPDATE pages SET derivation = ? WHERE id = ?", derivations)
        live = {key for _, _, key, _, _, _ in updates}
        for key in old_keys - live:
            await store.delete(key)
        summary.books += 1
    return summary
