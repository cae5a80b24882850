"""IIIF Presentation 3 documents: a Manifest per book, and curated collections as IIIF Collections.

Every canvas with a held image paints it through this service's Image API (so viewers get marked pixels and deep
zoom). A page without a held image stays in the sequence as an empty canvas (no painting annotation) whose label and
summary say so, sized like the book's other pages, so page numbering in viewers matches the printed book.
"""

from __future__ import annotations

from statistics import median_low
from typing import Any
from urllib.parse import quote

from imagesvc.errors import NotFound
from imagesvc.services import Services
from imagesvc.tools.books import require_book

__all__ = ["CONTEXT", "collection_document", "collections_index", "manifest_document"]

CONTEXT = "http://iiif.io/api/presentation/3/context.json"
_DEFAULT_SIZE = (1000, 1400)


def _text(value: str, lang: str = "none") -> dict[str, list[str]]:
    return {lang: [value]}


def _entry(label: str, value: str) -> dict[str, Any]:
    return {"label": _text(label, "en"), "value": _text(value)}


def _image_service(base: str, identifier: str) -> dict[str, Any]:
    return {"id": f"{base}/{quote(identifier, safe=':')}", "type": "ImageService3", "profile": "level2"}


def _thumbnail(base: str, identifier: str) -> dict[str, Any]:
    return {
        "id": f"{base}/{quote(identifier, safe=':')}/full/!300,300/0/default.jpg",
        "type": "Image",
        "format": "image/jpeg",
        "service": [_image_service(base, identifier)],
    }


def _canvas(
    manifest_id: str, base: str, page: dict[str, Any], full: dict[str, Any] | None, size: tuple[int, int]
) -> dict[str, Any]:
    number = page["number"]
    canvas_id = f"{manifest_id}/canvas/p{number}"
    if full is None:
        reason = page["unavailable_reason"] or "not held"
        return {
            "id": canvas_id,
            "type": "Canvas",
            "label": _text(f"p. {number} (no image held)", "en"),
            "summary": _text(f"This library holds no image of page {number} ({reason}).", "en"),
            "width": size[0],
            "height": size[1],
        }
    width, height = full["width"], full["height"]
    body = {
        "id": f"{base}/{quote(page['id'], safe=':')}/full/max/0/default.jpg",
        "type": "Image",
        "format": "image/jpeg",
        "width": width,
        "height": height,
        "service": [_image_service(base, page["id"])],
    }
    annotation = {
        "id": f"{canvas_id}/annotation/image",
        "type": "Annotation",
        "motivation": "painting",
        "body": body,
        "target": canvas_id,
    }
    return {
        "id": canvas_id,
        "type": "Canvas",
        "label": _text(f"p. {number}"),
        "width": width,
        "height": height,
        "items": [{"id": f"{canvas_id}/page", "type": "AnnotationPage", "items": [annotation]}],
    }


async def manifest_document(services: Services, book_id: str, base: str) -> dict[str, Any]:
    """The Manifest of a book (id or slug) whose image services live under ``base`` (``.../iiif/3``).

    Raises ``NotFound`` for an unknown or withdrawn book.
    """
    book = await require_book(services, book_id)
    pages = await services.db.page_list(book["id"])  # numbers and image state only: no page text read
    tiers = await services.db.renditions([p["id"] for p in pages])
    fulls = {p["id"]: None if p["image_unavailable"] else tiers[p["id"]].get("full") for p in pages}
    held = [f for f in fulls.values() if f is not None]
    size = (median_low([f["width"] for f in held]), median_low([f["height"] for f in held])) if held else _DEFAULT_SIZE
    manifest_id = f"{base}/manifest/{book['id']}"
    doc: dict[str, Any] = {
        "@context": CONTEXT,
        "id": manifest_id,
        "type": "Manifest",
        "label": _text(book["title"]),
        "metadata": [
            _entry("Author", book["author"]),
            *([_entry("Year", str(book["year"]))] if book["year"] else []),
            _entry("Language", book["language"]),
            *([_entry("DOI", f"https://doi.org/{book['doi']}")] if book["doi"] else []),
        ],
        "requiredStatement": {
            "label": _text("Attribution", "en"),
            "value": _text(f"Digitized by {book['institution']}; served by {services.settings.site_name}.", "en"),
        },
        "homepage": [
            {
                "id": services.book_url(book["slug"]),
                "type": "Text",
                "label": _text(book["title"]),
                "format": "text/html",
            }
        ],
        "provider": [
            {
                "id": book["institution_url"] or book["item_url"],
                "type": "Agent",
                "label": _text(book["institution"], "en"),
            }
        ],
        "items": [_canvas(manifest_id, base, p, fulls[p["id"]], size) for p in pages],
    }
    if book["summary"]:
        doc["summary"] = _text(book["summary"], "en")
    if (book["license"] or "").startswith("http"):
        doc["rights"] = book["license"]
    if book["viewing_direction"] and book["viewing_direction"] != "left-to-right":
        doc["viewingDirection"] = book["viewing_direction"]
    first = next((p for p in pages if fulls[p["id"]] is not None), None)
    if first is not None:
        doc["thumbnail"] = [_thumbnail(base, first["id"])]
    return doc


async def collection_document(services: Services, slug: str, base: str) -> dict[str, Any]:
    """A curated collection as an IIIF Collection of the Manifests of the books its illustrations come from, in the
    order the collection first cites them. Raises ``NotFound`` for an unknown slug."""
    row = await services.db.collection(slug)
    if row is None:
        raise NotFound(
            f"No collection has the slug {slug!r}.",
            recovery=["List collections with GET /gallery/collections or GET /iiif/3/collections."],
            details={"slug": slug},
        )
    live = await services.db.live_illustrations(row["item_ids"])
    items = [live[i] for i in row["item_ids"] if i in live]  # ids that no longer resolve are left out, not counted
    books: dict[str, dict[str, Any]] = {}
    for ill in items:
        if ill["book_id"] not in books and (book := await services.db.find_book(ill["book_id"])) is not None:
            books[ill["book_id"]] = book
    doc: dict[str, Any] = {
        "@context": CONTEXT,
        "id": f"{base}/collection/{quote(slug)}",
        "type": "Collection",
        "label": _text(row["title"], "en"),
        "summary": _text(f"{len(items)} illustrations from {len(books)} books. {row.get('description') or ''}", "en"),
        "items": [
            {"id": f"{base}/manifest/{b['id']}", "type": "Manifest", "label": _text(b["title"])} for b in books.values()
        ],
    }
    if items:
        doc["thumbnail"] = [_thumbnail(base, items[0]["id"])]
    return doc


async def collections_index(services: Services, base: str) -> dict[str, Any]:
    """Every curated collection, as one top-level IIIF Collection."""
    return {
        "@context": CONTEXT,
        "id": f"{base}/collections",
        "type": "Collection",
        "label": _text(f"{services.settings.site_name}: curated collections", "en"),
        "items": [
            {"id": f"{base}/collection/{quote(c['slug'])}", "type": "Collection", "label": _text(c["title"], "en")}
            for c in await services.db.collections()
        ],
    }
