"""Gallery items: the one shape an illustration has in every answer (search, a book's images, collections)."""

from __future__ import annotations

from typing import Any

from imagesvc.imaging import TIERS
from imagesvc.services import Services

__all__ = ["gallery_items"]


Rows = dict[str, dict[str, Any]]


def _read(catalog: Any, ids: list[str]) -> tuple[Rows, Rows, dict[str, Rows]]:
    """The live illustrations among ``ids``, their books and their renditions (blocking: the catalog's thread)."""
    rows = catalog.live_illustrations(ids)
    # Without the page counts an item does not show: counting read every page row of each book (300 a book).
    found = {b: catalog.find_book(b, counts=False) for b in {r["book_id"] for r in rows.values()}}
    books = {b: row for b, row in found.items() if row is not None}
    return rows, books, catalog.renditions(rows)


async def gallery_items(
    services: Services, ids: list[str], extra: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Gallery items for the live ones among ``ids``, in order; ``extra[i]`` is merged into item ``i``. Image URLs
    are on the image host; field names follow the README's Vocabulary. The reads are one trip to the catalog."""
    rows, books, tiers = await services.db.call(_read, ids)
    out = []
    for n, iid in enumerate(ids):
        ill = rows.get(iid)
        if ill is None or ill["book_id"] not in books:
            continue
        book, t = books[ill["book_id"]], tiers.get(iid, {})
        item = {
            "id": iid,
            "page_id": ill["page_id"],
            "book_id": book["id"],
            "page": ill["page_number"],
            "index": ill["idx"],
            **{f"image_{tier}": services.image_url(t[tier]["public_key"]) if tier in t else None for tier in TIERS},
            "book_title": book["title"],
            "author": book["author"],
            "year": ill["year"] if ill["year"] is not None else book["year"],
            "description": ill["description"],
            "type": ill["type"],
            "bbox": {"x": ill["bbox_x"], "y": ill["bbox_y"], "width": ill["bbox_w"], "height": ill["bbox_h"]},
            "museum_description": ill["museum_description"],
            "metadata": {"subjects": ill["subjects"], "figures": ill["figures"], "symbols": ill["symbols"]},
            "citation_url": services.page_url(book["slug"], ill["page_number"]),
        }
        if extra is not None:
            item.update(extra[n])
        out.append(item)
    return out
