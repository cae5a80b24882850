"""Ingest of one book: hash its masters, skip it whole when nothing changed, derive or reuse each page's tiers, then
write its rows in one transaction and delete the objects the book no longer refers to.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

from imagesvc.catalog import illustration_id, page_id
from imagesvc.catalog import writes as w
from imagesvc.errors import ImageRejected
from imagesvc.imaging import MarkSpec
from imagesvc.imaging.refusals import NOT_HELD, REASONS, reason_of, refused
from imagesvc.ingest.context import IngestContext
from imagesvc.ingest.manifest import Manifest
from imagesvc.ingest.objects import FORMAT_EXT, master_key, store_renditions
from imagesvc.ingest.work import DERIVATION_VERSION, Refusal, digest, file_sha256, page_derivation
from imagesvc.provenance.ingest import page_provenance

__all__ = ["DERIVATION_VERSION", "BookJob"]

log = logging.getLogger("imagesvc.ingest.pipeline")  # the ingest run's one logger, wherever its parts live


class BookJob:
    """Ingest of one book: reads masters, renders what changed, writes objects, then the rows in one transaction."""

    def __init__(self, book: dict[str, Any], manifest: Manifest, ctx: IngestContext) -> None:
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
        if ctx.catalog.scalar("SELECT withdrawn FROM books WHERE id = ?", (book["id"],)) == 1:
            # A takedown holds until `imagesvc books restore`: a rerun of the library's manifests must not bring the
            # book back (its public tiers are moved out of pub/, imagesvc/ingest/withdrawal.py).
            log.warning("book %s is withdrawn: not ingested; `imagesvc books restore` brings it back", book["slug"])
            self._skip()
            return
        for page in book["pages"]:
            if page.get("image"):
                self.master_sha[page["number"]] = await asyncio.to_thread(
                    file_sha256, self.manifest.image_path(page["image"])
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
            self._still_refused()
            self._skip()
            return
        results = await asyncio.gather(*(self.page(p) for p in book["pages"]))
        old_keys = self._stored_keys()
        with ctx.catalog.transaction() as conn:
            w.upsert_book(conn, book, source_hash)
            w.delete_pages_not_in(conn, book["id"], [p["number"] for p in book["pages"]])
            w.upsert_pages(conn, results)
        # Objects the book no longer refers to (re-derived pages) go only after the new rows are committed.
        for key in old_keys - self._stored_keys():
            await ctx.store.delete(key)

    def _skip(self) -> None:
        """Count the book as skipped whole: its pages and illustrations as they stand."""
        book, ctx = self.book, self.ctx
        ctx.summary.books_skipped += 1
        ctx.summary.pages += len(book["pages"])
        ctx.summary.illustrations += sum(len(p.get("illustrations", [])) for p in book["pages"] if p.get("image"))
        ctx.bar.update(len(book["pages"]))

    def _still_refused(self) -> None:
        """An unchanged book is skipped whole, but its refused pages are still missing: report them again."""
        images = {p["number"]: p.get("image") for p in self.book["pages"]}
        for page in self.ctx.catalog.pages(self.book["id"]):
            reason = page["unavailable_reason"]
            if page["image_unavailable"] and reason in REASONS:
                path = self.manifest.image_path(images[page["number"]])
                message = f"still refused ({reason}): the master is unchanged since it was refused"
                self._refuse(page["number"], path, reason, message)

    def _refuse(self, number: int, path: Path | None, reason: str, message: str) -> None:
        where = str(path) if path is not None else "(no file)"
        self.ctx.summary.refused.append(
            {"book": self.book["slug"], "page": number, "file": where, "reason": reason, "error": f"{where}: {message}"}
        )

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
            "unavailable_reason": NOT_HELD,
            "master_key": None,
            "master_sha256": None,
            "master_format": None,
            "master_bytes": None,
            "derivation": None,
            "width": None,
            "height": None,
        }
        illus_meta = page.get("illustrations", [])
        path = self.manifest.image_path(page["image"]) if page.get("image") else None
        try:
            if number not in self.master_sha:
                return row, {}, []
            bboxes = [(b["x"], b["y"], b["width"], b["height"]) for b in (i["bbox"] for i in illus_meta)]
            mark = self.mark_for(number)
            derivation = page_derivation(self.master_sha[number], ctx.spec, mark, bboxes)
            reused = self._reuse(pid, derivation, len(illus_meta))
            if reused is not None:
                renditions, hashes, prev = reused
                row.update(
                    {
                        k: prev[k]
                        for k in ("master_key", "master_sha256", "master_format", "width", "height", "master_bytes")
                    }
                )
            else:
                provenance = page_provenance(ctx.settings, book, number, self.master_sha[number])  # C2PA
                result = await ctx.render(path, mark, bboxes, provenance)
                if isinstance(result, Refusal):
                    log.warning(
                        "book %s page %s: %s refused: %s [%s]",
                        book["slug"],
                        number,
                        path,
                        result.message,
                        result.detail,
                    )
                    raise refused(result.reason, result.message)
                master = await asyncio.to_thread(path.read_bytes)
                renditions, hashes = await store_renditions(
                    ctx.store, ctx.summary, book["id"], pid, number, master, result
                )
                row.update(
                    master_key=master_key(book["id"], number, FORMAT_EXT.get(result.master_format, "bin")),
                    master_sha256=self.master_sha[number],
                    master_format=result.master_format,
                    master_bytes=len(master),
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
            # The public row gets the reason word only; the message (and the decoder's words) go to the operator.
            reason = reason_of(exc)
            self._refuse(number, path, reason, exc.message)
            row["unavailable_reason"] = reason
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
