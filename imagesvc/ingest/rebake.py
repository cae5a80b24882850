"""``imagesvc marks rebake``: redraw the visible marks of stored books from their clean copies.

Used after the site name, the site URL or the mark style changes. Each public tier is re-marked from its clean
tier in a process pool, stored under its new content-addressed key, and the catalog rows of a book switch in one
transaction; public objects no longer referenced are deleted only after that commit. Masters are not read.
"""

from __future__ import annotations

import asyncio
import hashlib
from concurrent.futures import Executor
from dataclasses import asdict, dataclass
from typing import Any

from imagesvc.catalog import Catalog
from imagesvc.imaging import MarkSpec, TierSpec
from imagesvc.imaging.marks import rebake
from imagesvc.imaging.xmp import strip_c2pa
from imagesvc.ingest.objects import public_key, write_immutable
from imagesvc.ingest.pipeline import DERIVATION_VERSION, digest, tier_spec
from imagesvc.provenance.ingest import Provenance, rebake_provenance
from imagesvc.storage import ObjectStore

__all__ = ["RebakeSummary", "rebake_marks"]


@dataclass
class RebakeSummary:
    books: int = 0
    renditions: int = 0
    changed: int = 0

    def line(self) -> str:
        return f"{self.books} books, {self.renditions} renditions re-marked, {self.changed} changed"


async def _rebake_one(
    store: ObjectStore,
    pool: Executor,
    row: dict[str, Any],
    mark: MarkSpec,
    spec: TierSpec,
    native: int,
    provenance: Provenance | None = None,
) -> tuple[str, str, bytes]:
    clean = (await store.get(row["clean_key"])).data
    loop = asyncio.get_running_loop()
    data = await loop.run_in_executor(pool, _rebake_call, clean, mark, spec, native, row["tier"], provenance)
    # Keys address the image without its C2PA manifest, as at ingest (imagesvc.provenance.sign.sign_page).
    return row["tier"], hashlib.sha256(strip_c2pa(data)).hexdigest(), data


def _rebake_call(
    clean: bytes, mark: MarkSpec, spec: TierSpec, native: int, tier: str, provenance: Provenance | None
) -> bytes:
    data = rebake(clean, mark, spec, native_longest_side=native)
    if provenance is not None and data != clean:  # C2PA: a marked tier is signed again
        return provenance.sign_tier(tier, data)
    return data


async def rebake_marks(
    *, settings: Any, catalog: Catalog, store: ObjectStore, pool: Executor, books: list[str] | None = None
) -> RebakeSummary:
    """Re-mark every page and illustration of ``books`` (ids or slugs; all live books when None)."""
    spec = tier_spec(settings)
    summary = RebakeSummary()
    targets = [catalog.find_book(b) for b in books] if books else catalog.list_books(limit=10**9, offset=0)[0]
    for book in targets:
        if book is None:
            continue
        old_keys: set[str] = set()
        updates: list[tuple[str, str, str, str, int]] = []  # owner, tier, new key, sha, size
        derivations: list[tuple[str, str]] = []
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
            provenance = rebake_provenance(settings, book, page)  # C2PA
            owners = [page["id"], *(i["id"] for i in illus)]
            tiers = catalog.renditions(owners)
            for owner in owners:
                native = max(tiers[owner]["full"]["width"], tiers[owner]["full"]["height"])
                iid = None if owner == page["id"] else owner
                jobs = [_rebake_one(store, pool, row, mark, spec, native, provenance) for row in tiers[owner].values()]
                for tier, sha, data in await asyncio.gather(*jobs):
                    key = public_key(book["id"], page["number"], tier, sha, iid)
                    await write_immutable(store, key, data, "image/jpeg")
                    old = tiers[owner][tier]["public_key"]
                    old_keys.add(old)
                    summary.renditions += 1
                    summary.changed += old != key
                    updates.append((owner, tier, key, sha, len(data)))
            bboxes = [(i["bbox_x"], i["bbox_y"], i["bbox_w"], i["bbox_h"]) for i in illus]
            derivation = digest(DERIVATION_VERSION, page["master_sha256"], asdict(spec), mark, bboxes)
            derivations.append((derivation, page["id"]))
        with catalog.transaction() as conn:
            conn.executemany(
                "UPDATE renditions SET public_key = ?, sha256 = ?, bytes = ? WHERE owner = ? AND tier = ?",
                [(key, sha, size, owner, tier) for owner, tier, key, sha, size in updates],
            )
            conn.executemany("UPDATE pages SET derivation = ? WHERE id = ?", derivations)
        live = {key for _, _, key, _, _ in updates}
        for key in old_keys - live:
            await store.delete(key)
        summary.books += 1
    return summary
