"""Book tools: list the catalogue and describe one book with its pages and their image URLs."""

from __future__ import annotations

from typing import Any

from imagesvc.errors import NotFound
from imagesvc.services import Services
from imagesvc.tools import Call, tool
from imagesvc.tools.citations import attribution

__all__ = ["INCLUDE_IMAGES", "book_summary", "get_book", "list_books", "require_book", "unknown_book"]

TIERS = ("full", "display", "thumb")
INCLUDE_IMAGES = {
    "type": "boolean",
    "default": False,
    "description": "MCP: also return up to 4 thumbnails as image content (about 92 KB); off by default.",
}


def require_book(services: Services, book_id: str, *, counts: bool = True) -> dict[str, Any]:
    """The live book with this id or slug, or ``NotFound`` with a way to find the right id."""
    book = services.catalog.find_book(book_id, counts=counts)
    if book is None:
        raise unknown_book(book_id)
    return book


def unknown_book(book_id: str) -> NotFound:
    """The 404 for an id or slug that names no live book, with the way to find the right one."""
    return NotFound(
        f"No book has the id or slug {book_id!r}.",
        recovery=["List books with GET /books (or the list_books tool) and use an id or slug from there."],
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
        "url": services.book_url(book["slug"]),
        "page_count": pages,
        "translation_progress": round((book.get("translated_pages") or 0) / pages, 3) if pages else 0.0,
        "attribution": attribution(book),
        "license": book["license"],
    }


def page_entry(services: Services, book: dict[str, Any], page: dict[str, Any], tiers: dict[str, Any]) -> dict[str, Any]:
    """One page of a book: its citation URL, text availability, and image URLs on the image host (or none)."""
    entry: dict[str, Any] = {
        "number": page["number"],
        "citation_url": services.page_url(book["slug"], page["number"]),
        "has_ocr": page["ocr"] is not None,
        "has_translation": page["translation"] is not None,
        "has_original": page["original"] is not None,
    }
    if page["image_unavailable"] or not tiers:
        entry["image_unavailable"] = True
        entry["image_unavailable_reason"] = page["unavailable_reason"]
        return entry
    for tier in TIERS:
        entry[f"image_{tier}"] = services.image_url(tiers[tier]["public_key"])
    entry["sizes"] = {tier: {"width": tiers[tier]["width"], "height": tiers[tier]["height"]} for tier in TIERS}
    return entry


@tool(
    "list_books",
    {
        "properties": {
            "limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50},
            "offset": {"type": "integer", "minimum": 0, "maximum": 1_000_000_000, "default": 0},
        }
    },
)
async def list_books(services: Services, call: Call, limit: int = 50, offset: int = 0) -> dict[str, Any]:
    """List the books of the library, ordered by title, with a total for paging."""
    rows, total = services.catalog.list_books(limit=limit, offset=offset)
    return {
        "books": [book_summary(services, row) for row in rows],
        "total": total,
        "limit": limit,
        "offset": offset,
        "hasMore": offset + len(rows) < total,
    }


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
    book = require_book(services, book_id)
    pages = services.catalog.pages(book["id"])
    tiers = services.catalog.renditions(p["id"] for p in pages)
    return {
        **book_summary(services, book),
        "summary": book["summary"],
        "chapters": book["chapters"],
        "edition": book["edition"],
        "viewing_direction": book["viewing_direction"],
        "iiif_manifest": f"{services.settings.site_url}/iiif/3/manifest/{book['id']}",
        "pages": [page_entry(services, book, p, tiers[p["id"]]) for p in pages],
    }
