"""Gallery tools: search illustrations (CLIP and full text), describe one, list a book's, and curated collections."""

from __future__ import annotations

import dataclasses
from typing import Any

from imagesvc.catalog import fold, illustration_key
from imagesvc.errors import InvalidRequest, NotFound
from imagesvc.imaging import TIERS
from imagesvc.search.engine import engine_for
from imagesvc.search.fusion import parse_query
from imagesvc.search.ranking import Query
from imagesvc.services import Services
from imagesvc.surface.arguments import YEAR
from imagesvc.surface.items import gallery_items
from imagesvc.surface.paging import envelope
from imagesvc.tools import Call, tool
from imagesvc.tools.books import INCLUDE_IMAGES, book_summary, require_book

__all__ = ["gallery_items", "get_book_images", "get_collection", "get_image", "list_collections", "search_images"]

_TERM = {"type": "string", "minLength": 1, "maxLength": 200}


SEARCH_SCHEMA = {
    "properties": {
        "query": {
            "type": "string",
            "maxLength": 500,
            "description": "Free text: what the picture shows, in any words. -word leaves out illustrations whose "
            'text has that word (-"two words" for a phrase).',
            "x-aliases": ["q"],
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
        "year_from": {**YEAR, "description": "Earliest year, inclusive."},
        "year_to": {**YEAR, "description": "Latest year, inclusive."},
        "book_id": {"type": "string", "minLength": 1, "description": "Book id or slug.", "x-aliases": ["book"]},
        "collection": {"type": "string", "minLength": 1, "description": "Collection slug."},
        "maxPerBook": {
            "type": "integer",
            "minimum": 1,
            "maximum": 1_000_000,
            "default": 3,
            "description": "At most this many results per book (1000 or more to enumerate).",
            "x-aliases": ["max_per_book"],
        },
        "fold_duplicates": {
            "type": "boolean",
            "default": False,
            "description": "Show one of each group of near-duplicate pictures; the others are listed in duplicates.",
        },
        "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 20},
        "offset": {"type": "integer", "minimum": 0, "maximum": 100_000, "default": 0},
        "cursor": {
            "type": "string",
            "minLength": 1,
            "maxLength": 200,
            "description": "next_cursor of the previous page: continues a listing without query or like, to any depth.",
        },
        "min_score": {
            "type": "number",
            "minimum": -1,
            "maximum": 2,
            "description": "Drop results whose similarity is lower. Text queries without CLIP: dense cosine + 0.2 x "
            "keyword score, 0.25 to 1.2; about 0.45 keeps the clearly related (docs/search.md).",
        },
        "include_images": INCLUDE_IMAGES,
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
    maxPerBook: int = 3,
    fold_duplicates: bool = False,
    limit: int = 20,
    offset: int = 0,
    cursor: str | None = None,
    include_images: bool = False,
    **filters: Any,
) -> dict[str, Any]:
    """Search illustrations by what they show, in any words: a dense text model (paraphrases, misspellings) fused
    with keyword search over descriptions, subjects, figures and symbols, and CLIP when weights are configured; and
    by type, subject, figure, symbol, year range, book or collection. -word in the query, or exclude, leaves out
    illustrations that mention a word.

    Filters apply before ranking; at most ``maxPerBook`` results per book. Each item has a ``similarity`` (the
    ranking score; ``min_score`` drops lower ones), its ``scores`` per signal and its near-duplicates' ids in
    ``duplicates``; with ``fold_duplicates`` only the best of each group is shown. ``total`` counts illustrations
    (as ranked; one withdrawn a moment ago is not shown, and the next result fills its place).
    ``search.signals`` says which signals ranked the results. Without ``query`` or ``like`` the listing is in catalog
    order and ``next_cursor`` continues it past any offset: with a high ``maxPerBook`` (1000) this enumerates every
    live illustration exactly once. Errors: unknown book, collection or ``like`` id (not_found); a cursor with a
    ranked query, with an offset, or not taken from ``next_cursor`` (invalid_request).
    """
    if cursor is not None:
        _check_cursor(cursor, offset, ranked=bool((query or "").strip()) or like is not None)
    book_ids = None
    if book_id is not None:
        book_ids = ((await require_book(services, book_id))["id"],)
    in_ids = None
    if collection is not None:
        in_ids = frozenset((await _require_collection(services, collection))["item_ids"])
    parsed = parse_query((query or "").strip() or None, exclude)
    engine = engine_for(services)
    q = Query(
        text=parsed.positive,
        like=fold(like) if like is not None else None,
        book_ids=book_ids,
        in_ids=in_ids,
        exclude_ids=await engine.excluded(parsed.negative) if parsed.negative else None,
        max_per_book=maxPerBook,
        limit=limit,
        offset=offset,
        fold_duplicates=fold_duplicates,
        after=cursor,
        **filters,
    )
    found, items = await _filled_page(services, engine, q)
    status = engine.status()
    status["signals"] = found.signals
    status["mode"] = "+".join(found.signals)
    if parsed.negative:
        status["excluded_terms"] = list(parsed.negative)
    if found.corrected:
        status["corrected"] = found.corrected
    if found.glossed is not None:  # how a Latin, Hebrew, Italian or Arabic query was read: its dictionary gloss
        status["glossed"] = {
            "language": found.glossed.language,
            "gloss": found.glossed.text,
            "words": dict(found.glossed.words),
        }
    unranked = q.text is None and like is None
    more = found.ranked.more or len(items) > limit
    items = items[:limit]
    last = items[-1]["id"] if items else None
    return envelope(
        items,
        total=found.ranked.total,
        limit=limit,
        offset=offset,
        has_more=more,
        next_cursor=last if unranked and more else None,
        search=status,
    )


FILL_TRIES = 3


async def _filled_page(services: Services, engine: Any, q: Query) -> tuple[Any, list[dict[str, Any]]]:
    """Rank ``q`` and build its items. Results ranked on the search snapshot but withdrawn from the catalog since are
    not shown; the page is filled with the next ranked results in their place (the search is asked again for as
    many more as were dropped, a few times at most), so a page is short only at the end of the results. May return
    one item past ``q.limit``, which says that more follow."""
    ask = q
    for _ in range(FILL_TRIES):
        found = await engine.search(ask)
        items = await _items(services, found)
        dropped = len(found.ranked.rows) - len(items)
        if not dropped or not found.ranked.more or len(items) > q.limit:
            break
        ask = dataclasses.replace(q, limit=ask.limit + dropped + 1)
    return found, items


async def _items(services: Services, found: Any) -> list[dict[str, Any]]:
    """The live items of one ranked page, each with its scores and near-duplicates."""
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
    return await gallery_items(services, [table.ids[r] for r in ranked.rows], extra)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _check_cursor(cursor: str, offset: int, *, ranked: bool) -> None:
    """A cursor continues the unranked listing from where ``next_cursor`` left it; anything else is a 400."""
    problem = None
    if ranked:
        problem = "A cursor continues the listing without query or like; ranked results page by offset."
    elif offset:
        problem = "Give either cursor or offset, not both."
    else:
        try:
            illustration_key(cursor)
        except ValueError:
            problem = f"{cursor!r} is not a cursor this service gave out."
    if problem is not None:
        raise InvalidRequest(
            problem,
            recovery=["Pass the next_cursor of the previous page unchanged, with the same filters and no offset."],
            details={"parameter": "cursor"},
        )


@tool(
    "get_image",
    {"required": ["id"], "properties": {"id": {"type": "string", "minLength": 1}, "include_images": INCLUDE_IMAGES}},
)
async def get_image(services: Services, call: Call, id: str, include_images: bool = False) -> dict[str, Any]:
    """One illustration's full metadata, museum description and source book context (title, author, year, DOI,
    page, citation URL) with the URL (``image_<tier>``) and size (``sizes``) of each image tier. Unknown or removed
    id: not_found."""
    id = fold(id)
    items = await gallery_items(services, [id])
    if not items:
        raise NotFound(
            f"No illustration has the id {id!r}.",
            recovery=["Illustration ids look like '<pageId>:<index>'; take them from search_images or GET /gallery."],
            details={"id": id},
        )
    item = items[0]
    tiers = (await services.db.renditions([id]))[id]
    book = await services.db.find_book(item["book_id"])
    item["sizes"] = {t: {"width": r["width"], "height": r["height"]} for t, r in tiers.items() if t in TIERS}
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
            "include_images": INCLUDE_IMAGES,
        },
    },
)
async def get_book_images(
    services: Services, call: Call, book_id: str, limit: int = 50, offset: int = 0, include_images: bool = False
) -> dict[str, Any]:
    """The illustrations of one book in page order, as gallery items. Unknown book: not_found."""
    book = await require_book(services, book_id)
    ids = [r["id"] for r in await services.db.book_illustrations(book["id"])]
    items = await gallery_items(services, ids[offset : offset + limit])
    return envelope(items, total=len(ids), limit=limit, offset=offset, book=book_summary(services, book))


async def _require_collection(services: Services, slug: str) -> dict[str, Any]:
    row = await services.db.collection(slug)
    if row is None:
        known = [c["slug"] for c in await services.db.collections()]
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
        "imageCount": len(items),  # the spec's name; counted from what resolves, never from stored ids
        "cover_image": cover["image_thumb"] if cover else None,
        "cover_id": cover["id"] if cover else None,
    }


@tool("list_collections", {"properties": {"include_images": INCLUDE_IMAGES}})
async def list_collections(services: Services, call: Call, include_images: bool = False) -> dict[str, Any]:
    """Curated image collections with a cover image and their number of (live) images."""
    rows = await services.db.collections()
    out = [_collection_entry(services, row, await gallery_items(services, row["item_ids"])) for row in rows]
    return envelope(out, total=len(out), limit=len(out))


@tool(
    "get_collection",
    {
        "required": ["slug"],
        "properties": {"slug": {"type": "string", "minLength": 1}, "include_images": INCLUDE_IMAGES},
    },
)
async def get_collection(services: Services, call: Call, slug: str, include_images: bool = False) -> dict[str, Any]:
    """One collection with its resolved items; ``imageCount`` always equals ``len(items)``. Unknown slug: not_found."""
    row = await _require_collection(services, slug)
    items = await gallery_items(services, row["item_ids"])
    return {**_collection_entry(services, row, items), "items": items}
