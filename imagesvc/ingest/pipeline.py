"""Ingest: manifest -> stored masters, clean and marked tiers, hashes -> catalog rows, one transaction per book.

Idempotent and resumable: a book whose manifest entry, master bytes and derivation settings are unchanged is skipped
whole; a page whose pixels inputs are unchanged reuses its stored renditions; objects are written only when their bytes
differ (stable keys) or are absent (content-addressed keys), so a rerun after a kill at any point converges.
Pixel work runs in a process pool across cores.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from concurrent.futures import Executor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from imagesvc.catalog import Catalog, illustration_id, page_id
from imagesvc.catalog import writes as w
from imagesvc.errors import ImageRejected
from imagesvc.imaging import MarkSpec, PageRenditions, Rendition, TierSpec
from imagesvc.ingest.manifest import Manifest
from imagesvc.ingest.objects import clean_key, master_key, public_key, write_if_changed, write_immutable
from imagesvc.provenance.ingest import Provenance, page_provenance
from imagesvc.storage import ObjectStore

__all__ = ["DERIVATION_VERSION", "IngestSummary", "digest", "ingest", "render_file", "tier_spec"]

log = logging.getLogger(__name__)

# Bump when tier or mark rendering changes in a way that should re-derive every page.
DERIVATION_VERSION = 1

_FORMAT_EXT = {"JPEG": "jpg", "PNG": "png", "TIFF": "tif", "WEBP": "webp", "GIF": "gif", "BMP": "bmp"}


@dataclass
class IngestSummary:
    """What one ingest run did."""

    books: int = 0
    books_skipped: int = 0
    pages: int = 0
    pages_rendered: int = 0
    illustrations: int = 0
    objects_written: int = 0
    refused: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        return (
            f"{self.books} books ({self.books_skipped} unchanged), {self.pages} pages "
            f"({self.pages_rendered} rendered), {self.illustrations} illustrations, "
            f"{self.objects_written} objects written, {len(self.refused)} refused, {self.seconds:.1f} s"
        )


def render_file(
    path: str,
    spec: TierSpec,
    mark: MarkSpec | None,
    bboxes: list[tuple[float, float, float, float]],
    provenance: Provenance | None = None,
):
    """Process-pool entry: read one master and derive everything from it; a refusal comes back as its message."""
    from PIL import Image

    from imagesvc.imaging.render import render_page

    # Pillow's own bomb guard (process-wide, ~179 MP by default) would otherwise refuse what the setting allows.
    Image.MAX_IMAGE_PIXELS = spec.max_pixels
    try:
        result = render_page(Path(path).read_bytes(), spec, mark, bboxes)
    except ImageRejected as exc:
        return exc.message
    return provenance.sign(result) if provenance is not None else result  # C2PA: sign the marked public tiers


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class _BookJob:
    """Ingest of one book: reads masters, renders what changed, writes objects, then the rows in one transaction."""

    def __init__(self, book: dict[str, Any], manifest: Manifest, ctx: _Context) -> None:
        self.book = book
        self.manifest = manifest
        self.ctx = ctx
        self.master_sha: dict[int, str] = {}

    def mark_for(self, number: int) -> MarkSpec:
        s = self.ctx.settings
        return MarkSpec(
            site=s.site_name,
            citation_url=f"{s.site_url}/book/{self.book['slug']}?page={number}",
            institution=self.book["attribution"]["institution"],
            faint=s.faint_mark,
        )

    async def run(self) -> None:
        book, ctx = self.book, self.ctx
        for page in book["pages"]:
            if page.get("image"):
                self.master_sha[page["number"]] = await asyncio.to_thread(
                    _file_sha256, self.manifest.image_path(page["image"])
                )
        source_hash = digest(
            DERIVATION_VERSION,
            book,
            self.master_sha,
            asdict(ctx.spec),
            ctx.settings.site_name,
            ctx.settings.site_url,
        )
        current = ctx.catalog.find_book(book["id"])
        if current is not None and current["source_hash"] == source_hash:
            ctx.summary.books_skipped += 1
            ctx.summary.pages += len(book["pages"])
            ctx.summary.illustrations += sum(len(p.get("illustrations", [])) for p in book["pages"] if p.get("image"))
            ctx.bar.update(len(book["pages"]))
            return
        results = await asyncio.gather(*(self.page(p) for p in book["pages"]))
        old_keys = self._stored_keys()
        with ctx.catalog.transaction() as conn:
            w.upsert_book(conn, book, source_hash)
            w.delete_pages_not_in(conn, book["id"], [p["number"] for p in book["pages"]])
            for row, renditions, illus in results:
                w.upsert_page(conn, row, renditions, illus)
        # Objects the book no longer refers to (re-derived pages) go only after the new rows are committed.
        for key in old_keys - self._stored_keys():
            await ctx.store.delete(key)

    def _stored_keys(self) -> set[str]:
        cat = self.ctx.catalog
        pages = cat.pages(self.book["id"])
        owners = [p["id"] for p in pages] + [i["id"] for i in cat.book_illustrations(self.book["id"])]
        keys = {p["master_key"] for p in pages if p["master_key"]}
        for tiers in cat.renditions(owners).values():
            for r in tiers.values():
                keys.update((r["clean_key"], r["public_key"]))
        return keys

    async def page(self, page: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
        book, ctx, number = self.book, self.ctx, page["number"]
        pid = page_id(book["id"], number)
        row: dict[str, Any] = {
            "id": pid,
            "book_id": book["id"],
            "number": number,
            "ocr": page.get("ocr"),
            "translation": page.get("translation"),
            "original": page.get("original"),
            "image_unavailable": 1,
            "unavailable_reason": "no copy of this page is held",
            "master_key": None,
            "master_sha256": None,
            "master_format": None,
            "derivation": None,
            "width": None,
            "height": None,
        }
        illus_meta = page.get("illustrations", [])
        try:
            if number not in self.master_sha:
                return row, {}, []
            bboxes = [(b["x"], b["y"], b["width"], b["height"]) for b in (i["bbox"] for i in illus_meta)]
            mark = self.mark_for(number)
            derivation = digest(DERIVATION_VERSION, self.master_sha[number], asdict(ctx.spec), mark, bboxes)
            reused = self._reuse(pid, derivation, len(illus_meta))
            if reused is not None:
                renditions, hashes, prev = reused
                row.update({k: prev[k] for k in ("master_key", "master_sha256", "master_format", "width", "height")})
            else:
                path = self.manifest.image_path(page["image"])
                provenance = page_provenance(ctx.settings, book, number, self.master_sha[number])  # C2PA
                result = await ctx.render(str(path), mark, bboxes, provenance)
                if isinstance(result, str):
                    raise ImageRejected(result)
                master = await asyncio.to_thread(path.read_bytes)
                renditions, hashes = await self._store(pid, number, master, result)
                row.update(
                    master_key=master_key(book["id"], number, _FORMAT_EXT.get(result.master_format, "bin")),
                    master_sha256=self.master_sha[number],
                    master_format=result.master_format,
                    width=result.width,
                    height=result.height,
                )
                ctx.summary.pages_rendered += 1
            row.update(image_unavailable=0, unavailable_reason=None, derivation=derivation)
            illus = []
            for index, meta in enumerate(illus_meta):
                iid = illustration_id(book["id"], number, index)
                illus.append({**meta, "id": iid, "index": index, **hashes[iid]})
            ctx.summary.illustrations += len(illus)
            return row, renditions, illus
        except ImageRejected as exc:
            ctx.summary.refused.append({"book": book["slug"], "page": number, "error": exc.message})
            log.debug("book %s page %s refused: %s", book["slug"], number, exc.message)
            row["unavailable_reason"] = f"the master image was refused at ingest: {exc.message}"
            return row, {}, []
        finally:
            ctx.summary.pages += 1
            ctx.bar.update(1)

    def _reuse(self, pid: str, derivation: str, n_illus: int):
        """Stored renditions and hashes of a page whose pixel inputs are unchanged, or None."""
        cat = self.ctx.catalog
        prev = cat.page(self.book["id"], int(pid.rsplit("-", 1)[1]))
        if prev is None or prev["derivation"] != derivation or prev["image_unavailable"]:
            return None
        ids = [f"{pid}:{i}" for i in range(n_illus)]
        rows = {i["id"]: i for i in cat.book_illustrations(self.book["id"]) if i["page_id"] == pid}
        if set(rows) != set(ids):
            return None
        renditions = cat.renditions([pid, *ids])
        hashes = {iid: {k: rows[iid][k] for k in ("phash", "dhash", "content_sha256")} for iid in ids}
        return renditions, hashes, prev

    async def _store(self, pid: str, number: int, master: bytes, result: PageRenditions):
        book_id, store, summary = self.book["id"], self.ctx.store, self.ctx.summary
        ext = _FORMAT_EXT.get(result.master_format, "bin")
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
                }

        add(pid, result.clean, result.public, None)
        for ill in result.illustrations:
            iid = f"{pid}:{ill.index}"
            renditions[iid] = {}
            add(iid, ill.clean, ill.public, iid)
            hashes[iid] = {"phash": ill.phash, "dhash": ill.dhash, "content_sha256": ill.clean["full"].sha256}
        summary.objects_written += sum(await asyncio.gather(*writes))
        return renditions, hashes


@dataclass
class _Context:
    settings: Any
    catalog: Catalog
    store: ObjectStore
    pool: Executor
    spec: TierSpec
    summary: IngestSummary
    bar: Any
    slots: asyncio.Semaphore

    async def render(
        self,
        path: str,
        mark: MarkSpec,
        bboxes: list[tuple[float, float, float, float]],
        provenance: Provenance | None = None,
    ):
        async with self.slots:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self.pool, render_file, path, self.spec, mark, bboxes, provenance)


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
        ctx = _Context(
            settings=settings,
            catalog=catalog,
            store=store,
            pool=pool,
            spec=tier_spec(settings),
            summary=summary,
            bar=bar,
            slots=asyncio.Semaphore(max(2, settings.workers * 2)),
        )
        for book in manifest.books:
            await _BookJob(book, manifest, ctx).run()
            summary.books += 1
    if manifest.collections:
        with catalog.transaction() as conn:
            w.replace_collections(conn, manifest.collections)
    summary.seconds = round(time.monotonic() - started, 3)
    return summary
