"""Book tools: list the catalogue and describe one book with its pages and their image URLs."""

from __future__ import annotations

from typing import Any

from imagesvc.catalog.library import SORTS, BookFilters, author_name, canonical_slug, facet_counts, query_books
from imagesvc.errors import InvalidRequest, NotFound
from imagesvc.imaging import TIERS
from imagesvc.services import Services
from imagesvc.surface.arguments import YEAR
from imagesvc.surface.citations import attribution
from imagesvc.surface.paging import envelope
from imagesvc.tools import Call, tool

__all__ = ["INCLUDE_IMAGES", "book_summary", "get_book", "list_books", "require_book", "unknown_book"]

INCLUDE_IMAGES = {
    "type": "boolean",
    "default": False,
    "description": "MCP: also return up to 4 thumbnails as image content (about 92 KB); off by default.",
}


async def require_book(services: Services, book_id: str, *, counts: bool = True) -> dict[str, Any]:
    """The live book with this id or slug, or ``NotFound`` with a way to find the right id."""
    book = await services.db.find_book(book_id, counts=counts)
    if book is None:
        raise unknown_book(book_id)
    return book


def unknown_book(book_id: str) -> NotFound:
    """The 404 for an id or slug that names no live book, with the way to find the right one."""
    return NotFound(
        f"No book has the id or slug {book_id!r}.",
        recovery=["Find books with GET /books/library (or the list_books tool) and use an id or slug from there."],
        details={"book_id": book_id},
    )


def book_summary(services: Services, book: dict[str, Any]) -> dict[str, Any]:
    """The catalogue row of a book: identity, edition, attribution and translation progress."""
    pages = book.get("page_count") or 0
    return {
        "id": book["id"],
        "slug": book["slug"],
        "title": book["title"],
        "author": book["author"],
        "author_id": book["author_id"],
        "language": book["language"],
        "year": book["year"],
        "doi": book["doi"],
        "doi_url": f"https://doi.org/{book['doi']}" if book["doi"] else None,
        "translator": book["translator"],
        "citation_url": services.book_url(book["slug"]),
        "page_count": pages,
        "translation_progress": round((book.get("translated_pages") or 0) / pages, 3) if pages else 0.0,
        "translated_at": book["translated_at"],
        "first_translation": bool(book["first_translation"]),
        "category": book["category"],
        "collection": book["collection"],
        "library": book["institution"],
        "work_id": book["work_id"],
        "edition_key": book["edition_key"],
        "edition_languages": book["edition_languages"],
        "attribution": attribution(book),
        "license": book["license"],
    }


def page_entry(services: Services, book: dict[str, Any], page: dict[str, Any], tiers: dict[str, Any]) -> dict[str, Any]:
    """One page of a book: its citation URL, text availability, and image URLs on the image host (or none)."""
    entry: dict[str, Any] = {
        "page": page["number"],
        "citation_url": services.page_url(book["slug"], page["number"]),
        "has_ocr": bool(page["has_ocr"]),
        "has_translation": bool(page["has_translation"]),
        "has_original": bool(page["has_original"]),
    }
    if page["image_unavailable"] or not tiers:
        entry["image_unavailable"] = True
        entry["image_unavailable_reason"] = page["unavailable_reason"]
        return entry
    for tier in TIERS:
        entry[f"image_{tier}"] = services.image_url(tiers[tier]["public_key"])
    entry["sizes"] = {tier: {"width": tiers[tier]["width"], "height": tiers[tier]["height"]} for tier in TIERS}
    return entry


_TEXT = {"type": "string", "minLength": 1, "maxLength": 200}
LIST_BOOKS_SCHEMA: dict[str, Any] = {
    "properties": {
        "author_id": {**_TEXT, "description": "Canonical author slug: exactly that person's books (echoed as author)."},
        "year_from": {**YEAR, "description": "Edition year from (books without a year never match)."},
        "year_to": {**YEAR, "description": "Edition year up to, inclusive."},
        "language": {**_TEXT, "description": "Edition language, e.g. Latin."},
        "category": {**_TEXT, "description": "Catalogue category, e.g. alchemy."},
        "collection": {**_TEXT, "description": "Book collection slug."},
        "library": {**_TEXT, "description": "Contributing library: its name or the name as a slug."},
        "search": {**_TEXT, "description": "Free text over titles and authors, relevance-ranked."},
        "has_translation": {"type": "boolean", "description": "true: only translated books; false: only untranslated."},
        "first_translation": {"type": "boolean", "description": "true: only first translations of their work."},
        "has_images": {"type": "boolean", "description": "true: only books with illustrations; false: only without."},
        "has_edition": {"type": "string", "pattern": "^[A-Za-z]{2,3}$", "description": "ISO 639 code: readable in."},
        "work_id": {**_TEXT, "description": "Editions of one work."},
        "edition_key": {**_TEXT, "description": "Digitizations of one printing; take the value from a result row."},
        "sort": {
            "enum": list(SORTS),
            "default": "recent-translation",
            "description": "Order; with search and no sort, relevance.",
        },
        "limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50},
        "cursor": {
            "type": "string",
            "minLength": 1,
            "maxLength": 200,
            "description": "next_cursor of the previous page (sort=title-asc): continues the listing to any depth.",
        },
        "facets": {
            "type": "boolean",
            "default": False,
            "description": "Also count the matching books by language, library, collection, century and has_images "
            "(each without its own filter) in facets.",
        },
        "skip": {
            "type": "integer",
            "minimum": 0,
            "maximum": 1_000_000_000,
            "default": 0,
            "description": "Offset.",
        },
    }
}


@tool("list_books", LIST_BOOKS_SCHEMA)
async def list_books(
    services: Services,
    call: Call,
    limit: int = 50,
    skip: int = 0,
    sort: str | None = None,
    cursor: str | None = None,
    facets: bool = False,
    **filters: Any,
) -> dict[str, Any]:
    """Browse the catalogue: filter by author, edition year, language, category, collection, library, work, edition
    key, translation and edition language, or search titles and authors; sort by recent translation (default),
    recently added, title or date. Every row carries id, slug, title, author, author_id, language, year and
    translation_progress; every answer carries total.

    With ``author_id`` the answer echoes the canonical author as ``author: {author_id, name}`` (name None when no
    live book has that author).
    """
    author = None
    if filters.get("author_id") is not None:
        filters["author_id"] = canonical_slug(filters["author_id"])
        author = {"author_id": filters["author_id"], "name": await services.db.call(author_name, filters["author_id"])}
    if cursor is not None:
        await _check_cursor(services, cursor, sort, skip)
    chosen = BookFilters(**filters)
    rows, total = await services.db.call(query_books, chosen, sort=sort, limit=limit, offset=skip, after=cursor)
    items = [book_summary(services, row) for row in rows]
    extra: dict[str, Any] = {"author": author} if author else {}
    if facets:
        counts = await services.db.call(facet_counts, chosen)
        extra["facets"] = {name: [{"value": v, "count": n} for v, n in found] for name, found in counts.items()}
    keyset = sort == "title-asc" and len(items) == limit
    more = None if cursor is None else keyset  # a keyset page knows only whether it was cut
    next_cursor = items[-1]["id"] if keyset else None
    return envelope(items, total=total, limit=limit, offset=skip, has_more=more, next_cursor=next_cursor, **extra)


async def _check_cursor(services: Services, cursor: str, sort: str | None, skip: int) -> None:
    """A cursor continues a title-ordered listing from a book id ``next_cursor`` gave; anything else is a 400."""
    problem = None
    if sort != "title-asc":
        problem = "A cursor continues a listing sorted by title (sort=title-asc); other orders page by skip."
    elif skip:
        problem = "Give either cursor or skip, not both."
    elif await services.db.call(lambda c: c.query_one("SELECT 1 AS x FROM books WHERE id = ?", (cursor,))) is None:
        problem = f"{cursor!r} is not a cursor this service gave out."
    if problem is not None:
        raise InvalidRequest(
            problem,
            recovery=["Pass the next_cursor of the previous page unchanged, with the same filters and no skip."],
            details={"parameter": "cursor"},
        )


@tool(
    "get_book",
    {
        "required": ["book_id"],
        "properties": {
            "book_id": {"type": "string", "minLength": 1, "description": "Book id or slug."},
            "include_images": INCLUDE_IMAGES,
        },
    },
)
async def get_book(services: Services, call: Call, book_id: str, include_images: bool = False) -> dict[str, Any]:
    """Book metadata (summary, chapters, DOI, edition info, attribution) and the page list with image URLs.

    Pages with no held image carry ``image_unavailable: true`` and no image URL at all.
    """
    book = await require_book(services, book_id)
    pages = await services.db.page_list(book["id"])  # no page text: listing 300 pages must not read 1.6 MB
    tiers = await services.db.renditions([p["id"] for p in pages])
    return {
        **book_summary(services, book),
        "summary": book["summary"],
        "chapters": book["chapters"],
        "edition": book["edition"],
        "viewing_direction": book["viewing_direction"],
        "iiif_manifest": f"{services.settings.site_url}/iiif/3/manifest/{book['id']}",
        "pages": [page_entry(services, book, p, tiers[p["id"]]) for p in pages],
    }
