"""Gallery tools: search illustrations (CLIP and full text), describe one, list a book's, and curated collections."""

from __future__ import annotations

from typing import Any

from imagesvc.errors import NotFound
from imagesvc.search.engine import engine_for
from imagesvc.search.fusion import parse_query
from imagesvc.search.gallery import Query
from imagesvc.services import Services
from imagesvc.tools import Call, tool
from imagesvc.tools.books import book_summary, require_book

__all__ = ["gallery_items", "get_book_images", "get_collection", "get_image", "list_collections", "search_images"]

TIERS = ("full", "display", "thumb")
_TERM = {"type": "string", "minLength": 1, "maxLength": 200}


def _books(services: Services, book_ids: set[str]) -> dict[str, dict[str, Any]]:
    return {b: row for b in book_ids if (row := services.catalog.find_book(b)) is not None}


def gallery_items(services: Services, ids: list[str], extra: list[dict[str, Any]] | None = None) -> list[dict]:
    """Gallery items (reference field names) for the live ones among ``ids``, in order; ``extra[i]`` is merged
    into item ``i``. Image URLs are on the image host."""
    rows = services.catalog.live_illustrations(ids)
    books = _books(services, {r["book_id"] for r in rows.values()})
    tiers = services.catalog.renditions(rows)
    out = []
    for n, iid in enumerate(ids):
        ill = rows.get(iid)
        if ill is None or ill["book_id"] not in books:
            continue
        book, t = books[ill["book_id"]], tiers.get(iid, {})
        item = {
            "id": iid,
            "pageId": ill["page_id"],
            "bookId": book["id"],
            "pageNumber": ill["page_number"],
            "detectionIndex": ill["idx"],
            "imageUrl": services.image_url(t["display"]["public_key"]) if "display" in t else None,
            "thumbnailUrl": services.image_url(t["thumb"]["public_key"]) if "thumb" in t else None,
            "bookTitle": book["title"],
            "author": book["author"],
            "year": ill["year"] if ill["year"] is not None else book["year"],
            "description": ill["description"],
            "type": ill["type"],
            "bbox": {"x": ill["bbox_x"], "y": ill["bbox_y"], "width": ill["bbox_w"], "height": ill["bbox_h"]},
            "museumDescription": ill["museum_description"],
            "metadata": {"subjects": ill["subjects"], "figures": ill["figures"], "symbols": ill["symbols"]},
            "citationUrl": services.page_url(book["slug"], ill["page_number"]),
        }
        if extra is not None:
            item.update(extra[n])
        out.append(item)
    return out


SEARCH_SCHEMA = {
    "properties": {
        "query": {
            "type": "string",
            "maxLength": 500,
            "description": "Free text: what the picture shows, in any words. -word leaves out illustrations whose "
            'text has that word (-"two words" for a phrase).',
        },
        "exclude": {
            "type": "string",
            "maxLength": 500,
            "description": "Words or quoted phrases, comma or space separated: illustrations whose text has any of "
            "them are left out (as -word in query).",
        },
        "like": {"type": "string", "minLength": 1, "description": "More like this: an illustration id."},
        "type": _TERM,
        "subject": _TERM,
        "figure": _TERM,
        "symbol": _TERM,
        "year_from": {"type": "integer"},
        "year_to": {"type": "integer"},
        "book_id": {"type": "string", "minLength": 1, "description": "Book id or slug."},
        "collection": {"type": "string", "minLength": 1, "description": "Collection slug."},
        "max_per_book": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 3},
        "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 20},
        "offset": {"type": "integer", "minimum": 0, "maximum": 100_000, "default": 0},
        "min_score": {
            "type": "number",
            "minimum": -1,
            "maximum": 2,
            "description": "Drop results whose similarity is lower. Text queries without CLIP: dense cosine + 0.2 x "
            "keyword score, 0.25 to 1.2; about 0.45 keeps the clearly related (docs/search.md).",
        },
    }
}


@tool("search_images", SEARCH_SCHEMA)
async def search_images(
    services: Services,
    call: Call,
    query: str | None = None,
    like: str | None = None,
    exclude: str | None = None,
    book_id: str | None = None,
    collection: str | None = None,
    max_per_book: int = 3,
    limit: int = 20,
    offset: int = 0,
    **filters: Any,
) -> dict[str, Any]:
    """Search illustrations by what they show, in any words: a dense text model (paraphrases, misspellings) fused
    with keyword search over descriptions, subjects, figures and symbols, and CLIP when weights are configured; and
    by type, subject, figure, symbol, year range, book or collection. -word in the query, or exclude, leaves out
    illustrations that mention a word.

    Filters apply before ranking; at most ``max_per_book`` results per book (1000 to enumerate). Each item has a
    ``similarity`` (the ranking score; ``min_score`` drops lower ones) and its ``scores`` per signal;
    ``search.signals`` says which signals ranked the results. Unknown book, collection or ``like`` id: not_found.
    """
    book_ids = None
    if book_id is not None:
        book_ids = (require_book(services, book_id)["id"],)
    in_ids = None
    if collection is not None:
        in_ids = frozenset(_require_collection(services, collection)["item_ids"])
    parsed = parse_query((query or "").strip() or None, exclude)
    engine = engine_for(services)
    q = Query(
        text=parsed.positive,
        like=like,
        book_ids=book_ids,
        in_ids=in_ids,
        exclude_ids=engine.excluded(parsed.negative) if parsed.negative else None,
        max_per_book=max_per_book,
        limit=limit,
        offset=offset,
        **filters,
    )
    found = await engine.search(q)
    table, ranked = found.table, found.ranked
    extra = []
    for row, s, c, t, dups in zip(
        ranked.rows, ranked.similarity, ranked.clip, ranked.text, ranked.duplicates, strict=True
    ):
        iid = table.ids[row]
        scores = {
            "clip": c,
            "text": t,
            "dense": _rounded(found.dense.get(iid)),
            "keyword": _rounded(found.fts.get(iid)),
        }
        extra.append({"similarity": s, "scores": scores, "duplicates": [table.ids[d] for d in dups]})
    items = gallery_items(services, [table.ids[r] for r in ranked.rows], extra)
    status = engine.status()
    status["signals"] = found.signals
    status["mode"] = "+".join(found.signals)
    if parsed.negative:
        status["excluded_terms"] = list(parsed.negative)
    if found.corrected:
        status["corrected"] = found.corrected
    return {
        "items": items,
        "total": ranked.total,
        "hasMore": offset + len(ranked.rows) < ranked.total,
        "limit": limit,
        "offset": offset,
        "search": status,
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


@tool("get_image", {"required": ["id"], "properties": {"id": {"type": "string", "minLength": 1}}})
async def get_image(services: Services, call: Call, id: str) -> dict[str, Any]:
    """One illustration's full metadata, museum description and source book context (title, author, year, DOI,
    page, citation URL) with the URL and size of each image tier. Unknown or removed id: not_found."""
    items = gallery_items(services, [id])
    if not items:
        raise NotFound(
            f"No illustration has the id {id!r}.",
            recovery=["Illustration ids look like '<pageId>:<index>'; take them from search_images or GET /gallery."],
            details={"id": id},
        )
    item = items[0]
    tiers = services.catalog.renditions([id])[id]
    book = services.catalog.find_book(item["bookId"])
    item["tiers"] = {
        t: {"url": services.image_url(r["public_key"]), "width": r["width"], "height": r["height"]}
        for t, r in tiers.items()
        if t in TIERS
    }
    item["book"] = book_summary(services, book) if book else None
    return item


@tool(
    "get_book_images",
    {
        "required": ["book_id"],
        "properties": {
            "book_id": {"type": "string", "minLength": 1, "description": "Book id or slug."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50},
            "offset": {"type": "integer", "minimum": 0, "maximum": 1_000_000_000, "default": 0},
        },
    },
)
async def get_book_images(
    services: Services, call: Call, book_id: str, limit: int = 50, offset: int = 0
) -> dict[str, Any]:
    """The illustrations of one book in page order, as gallery items. Unknown book: not_found."""
    book = require_book(services, book_id)
    ids = [r["id"] for r in services.catalog.book_illustrations(book["id"])]
    items = gallery_items(services, ids[offset : offset + limit])
    return {
        "book": book_summary(services, book),
        "items": items,
        "total": len(ids),
        "hasMore": offset + limit < len(ids),
        "limit": limit,
        "offset": offset,
    }


def _require_collection(services: Services, slug: str) -> dict[str, Any]:
    row = services.catalog.collection(slug)
    if row is None:
        known = [c["slug"] for c in services.catalog.collections()]
        raise NotFound(
            f"No collection has the slug {slug!r}.",
            recovery=[f"Use one of: {', '.join(known)}." if known else "This library has no collections yet."],
            details={"slug": slug},
        )
    return row


def _collection_entry(services: Services, row: dict[str, Any], items: list[dict[str, Any]]) -> dict[str, Any]:
    cover = next((i for i in items if i["id"] == row["cover_id"]), items[0] if items else None)
    return {
        "id": row["slug"],
        "slug": row["slug"],
        "title": row["title"],
        "description": row["description"],
        "featured": bool(row["featured"]),
        "imageCount": len(items),  # counted from what resolves, never from stored ids
        "coverImage": cover["thumbnailUrl"] if cover else None,
        "coverId": cover["id"] if cover else None,
    }


@tool("list_collections", {"properties": {}})
async def list_collections(services: Services, call: Call) -> dict[str, Any]:
    """Curated image collections with a cover image and their number of (live) images."""
    rows = services.catalog.collections()
    out = [_collection_entry(services, row, gallery_items(services, row["item_ids"])) for row in rows]
    return {"collections": out, "total": len(out)}


@tool("get_collection", {"required": ["slug"], "properties": {"slug": {"type": "string", "minLength": 1}}})
async def get_collection(services: Services, call: Call, slug: str) -> dict[str, Any]:
    """One collection with its resolved items; ``imageCount`` always equals ``len(items)``. Unknown slug: not_found."""
    row = _require_collection(services, slug)
    items = gallery_items(services, row["item_ids"])
    return {**_collection_entry(services, row, items), "items": items}
