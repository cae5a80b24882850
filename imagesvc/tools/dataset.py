"""The dataset a key may fetch, and what changed in it: ``list_dataset_images`` (keyset-cursored listing of every
page image with its tiers' pixel and byte sizes and SHA-256 digests) and ``list_dataset_changes`` (the book change
log in the shape of IIIF Change Discovery 1.0: an Activity Streams OrderedCollection of Create, Update and Delete).

Both are for keys (spec §5: bulk dataset access needs one) and deliver no pixels and no page text: each is one
request against the limit and spends no units, like every other metadata door.

Digests here are of the stored objects. What ``/image`` or an archive sends a key is those bytes plus a note and a
signature made for that request (docs/provenance.md), so a downloaded file is checked against the archive's own
``manifest-sha256.txt``; these digests say whether the stored image changed, and so whether to fetch it again.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

from imagesvc.catalog.dataset import book_versions, change_count, changes, dataset_pages, dataset_total
from imagesvc.catalog.reader import counts
from imagesvc.errors import InvalidRequest, NotFound
from imagesvc.imaging import TIERS
from imagesvc.services import Services
from imagesvc.surface.arguments import not_text
from imagesvc.surface.paging import envelope
from imagesvc.tools import Call, tool
from imagesvc.tools.archive import MAX_PAGE, require_key
from imagesvc.tools.books import require_book

__all__ = ["CHANGES_PAGE", "list_dataset_changes", "list_dataset_images"]

CHANGES_PAGE = 100  # activities per OrderedCollectionPage: page k holds the (k-1)*100+1-th to the k*100-th change
DISCOVERY_CONTEXT = "http://iiif.io/api/discovery/1/context.json"
# What each digest of the listing is of, in every answer: none is a digest of a delivered file.
DIGESTS = {
    "master.sha256": "the stored master file",
    "tiers.*.marked.content_sha256": "the stored marked copy without the C2PA manifest signed at ingest",
    "tiers.*.clean.sha256": "the stored clean copy",
    "delivered_files": "Every delivery adds a note and a signature made for that request, so no digest here matches "
    "a delivered file: check those against the archive's manifest-sha256.txt (the integrity source). Compare these "
    "digests between listings to learn which stored images changed.",
}


def _cursor(book_id: str, number: int) -> str:
    return base64.urlsafe_b64encode(json.dumps([book_id, number]).encode()).decode().rstrip("=")


def _after(cursor: str) -> tuple[str, int]:
    try:
        book_id, number = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        # The caller's text decoded: a page number the catalog could not compare (past int64, or a JSON true), or an
        # id holding what no text holds (NUL, a lone surrogate: no UTF-8 for either catalog), is as foreign as
        # malformed base64.
        if not isinstance(book_id, str) or not_text(book_id) or type(number) is not int or not 0 <= number <= MAX_PAGE:
            raise ValueError(cursor)
    except (ValueError, TypeError) as exc:
        raise InvalidRequest(
            "cursor is not one this service gave out.",
            recovery=["Pass next_cursor from the previous answer unchanged, or leave cursor out to start over."],
            details={"parameter": "cursor"},
        ) from exc
    return book_id, number


def _tiers(services: Services, tiers: dict[str, Any], clean: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for tier in TIERS:
        r = tiers.get(tier)
        if r is None:
            continue
        entry: dict[str, Any] = {
            # The page's pixels; the marked copy is larger where its mark went in a strip below the page.
            "width": r["clean_width"] or r["width"],
            "height": r["clean_height"] or r["height"],
            # The public tier is stored signed (C2PA at ingest, salted): its digest is of the image without that
            # manifest, the content its immutable URL names; bytes is the stored file's size.
            "marked": {
                "bytes": r["bytes"],
                "content_sha256": r["sha256"],
                "url": services.image_url(r["public_key"]),
                "width": r["width"],
                "height": r["height"],
            },
        }
        if clean:  # clean copies only for keys that may fetch them
            entry["clean"] = {"bytes": r["clean_bytes"], "sha256": r["clean_sha256"]}
        out[tier] = entry
    return out


@tool(
    "list_dataset_images",
    {
        "properties": {
            "book_id": {"type": "string", "minLength": 1, "description": "Only this book (id or slug)."},
            "cursor": {"type": "string", "minLength": 1, "maxLength": 200, "description": "next_cursor to go on."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 200},
        }
    },
)
async def list_dataset_images(
    services: Services, call: Call, limit: int = 200, book_id: str | None = None, cursor: str | None = None
) -> dict[str, Any]:
    """Every page image a key may fetch, in book and page order, keyset-paged (next_cursor): per page its tiers'
    pixel sizes, byte sizes and SHA-256 of the stored clean copies (for full-tier keys) and of the marked copies'
    content (without the C2PA manifest signed at ingest),
    the master's digest and size, and the book's last change. Keys only; no units spent.

    Pages with no held image carry ``image_unavailable: true`` and no tiers. Digests are of the stored objects: use
    them to decide what to fetch again; check the bytes received against the archive's manifest-sha256.txt.
    """
    require_key(call, "The dataset listing and other bulk dataset features")
    if book_id is not None:
        book_id = (await require_book(services, book_id, counts=False))["id"]
    rows = await services.db.call(dataset_pages, _after(cursor) if cursor else None, limit + 1, book_id)
    more = len(rows) > limit
    rows = rows[:limit]
    renditions = await services.db.renditions([r["page_id"] for r in rows])
    versions = await services.db.call(book_versions, sorted({r["book_id"] for r in rows}))
    clean = call.caller.allowance.clean_allowed
    items = []
    for row in rows:
        version = versions.get(row["book_id"], {})
        item: dict[str, Any] = {
            "book_id": row["book_id"],
            "slug": row["slug"],
            "page": row["number"],
            "changed_at": version.get("at"),
            "change": version.get("seq"),
        }
        if row["image_unavailable"] or not renditions[row["page_id"]]:
            item |= {"image_unavailable": True, "image_unavailable_reason": row["unavailable_reason"]}
        else:
            item["master"] = {
                "sha256": row["master_sha256"],
                "bytes": row["master_bytes"],
                "format": row["master_format"],
                "width": row["width"],
                "height": row["height"],
            }
            item["tiers"] = _tiers(services, renditions[row["page_id"]], clean)
        items.append(item)
    next_cursor = _cursor(rows[-1]["book_id"], rows[-1]["number"]) if more and rows else None
    if book_id is None:  # every live page: the count /health reports, read off the loop once per catalog change
        total = (await services.db.call(counts))["pages"]
    else:  # one book's pages: an index range
        total = await services.db.call(dataset_total, book_id)
    return envelope(items, total=total, limit=limit, has_more=more, next_cursor=next_cursor, digests=DIGESTS)


@tool(
    "list_dataset_changes",
    {
        "properties": {
            "page": {"type": "integer", "minimum": 1, "maximum": 100_000_000, "description": "Page of the feed."},
        }
    },
)
async def list_dataset_changes(services: Services, call: Call, page: int | None = None) -> dict[str, Any]:
    """What changed in the dataset, for incremental harvests, as IIIF Change Discovery 1.0: without page, the
    OrderedCollection (totalItems, first and last pages); with page, an OrderedCollectionPage of Create, Update and
    Delete activities on books (object: the book's IIIF manifest), oldest first, each with seq (unique, increasing in
    commit order). Start at last and follow prev back to a page whose first seq is at or before the last seq you
    processed; process every activity with a higher seq. Keys only; no units spent.
    """
    require_key(call, "The change feed and other bulk dataset features")
    settings = services.settings
    base = f"{settings.site_url}{settings.base_path}/dataset/changes"
    total = await services.db.call(change_count)
    pages = max(1, math.ceil(total / CHANGES_PAGE))

    def ref(k: int) -> dict[str, str]:
        return {"id": f"{base}?page={k}", "type": "OrderedCollectionPage"}

    if page is None:
        return {
            "@context": DISCOVERY_CONTEXT,
            "id": base,
            "type": "OrderedCollection",
            "totalItems": total,
            "first": ref(1),
            "last": ref(pages),
        }
    if page > pages:
        raise NotFound(
            f"The change feed has {pages} page(s); there is no page {page}.",
            recovery=[f"Start from {base} and follow its last and prev links."],
            details={"pages": pages},
        )
    start = (page - 1) * CHANGES_PAGE
    items = [
        {
            "id": f"{base}?page={page}#{row['seq']}",
            "type": row["kind"],
            "object": {
                "id": f"{settings.site_url}/iiif/3/manifest/{row['book_id']}",
                "type": "Manifest",
                "seeAlso": [
                    {"id": f"{settings.site_url}{settings.base_path}/books/{row['slug']}/archive", "type": "Dataset"}
                ],
            },
            "endTime": row["at"],
            # The change log's sequence number: increasing in commit order and never shared, where endTime (whole
            # seconds) can be: a harvester resumes after the last seq it processed.
            "seq": row["seq"],
        }
        for row in await services.db.call(changes, start + 1, start + CHANGES_PAGE)
    ]
    body: dict[str, Any] = {
        "@context": DISCOVERY_CONTEXT,
        "id": f"{base}?page={page}",
        "type": "OrderedCollectionPage",
        "partOf": {"id": base, "type": "OrderedCollection"},
        "startIndex": start,
    }
    if page > 1:
        body["prev"] = ref(page - 1)
    if page < pages:
        body["next"] = ref(page + 1)
    body["orderedItems"] = items
    return body
