"""The ``get_vectors`` tool behind ``GET /vectors/{store}``: embedding vectors in keyset pages, as JSON or base64.

Stores in this service: ``clip`` (every row of the current CLIP index: illustration id and the content hash it was
embedded from), ``gallery`` (the live illustrations' CLIP vectors with book, page and type), ``books`` (per live book,
the normalised mean of its live illustrations' vectors), ``artworks`` (none here: artworks belong to another service).
"""

from __future__ import annotations

import base64
import bisect
from typing import Any

import numpy as np

from imagesvc.errors import NotFound
from imagesvc.search.engine import engine_for
from imagesvc.search.snapshot import SearchSnapshot
from imagesvc.services import Services
from imagesvc.tools import Call, tool

__all__ = ["STORES", "get_vectors"]

STORES = ("books", "gallery", "clip", "artworks")
EMPTY_REASON = {
    "artworks": "This service holds no artwork vectors; artworks are indexed by another service.",
    None: "No vectors yet: CLIP is off or `imagesvc index` has not run (see the search status).",
}


Listing = tuple[list[str], np.ndarray, np.ndarray, list[dict[str, Any]]]


def _listing(snap: SearchSnapshot, store: str) -> Listing:
    """(sorted ids, a matrix, each id's row in it, per-id extra fields) of one store of ``snap``. Rows point into the
    snapshot's own matrix, which is not copied. Blocking: run it in a worker thread."""
    index, table = snap.index, snap.table
    if store == "artworks" or index is None or not snap.clip or not index.ids:
        return [], np.zeros((0, 0), np.float32), np.zeros(0, np.int64), []
    if store == "clip":
        order = np.argsort(np.array(index.ids, dtype=object), kind="stable")
        extra = [{"content_hash": index.hashes[i]} for i in order]
        return [index.ids[i] for i in order], index.embeddings, order, extra
    assert table.vec_row is not None
    live = np.flatnonzero(table.live & (table.vec_row >= 0))
    if store == "gallery":
        live = live[np.argsort(np.array(table.ids, dtype=object)[live], kind="stable")]
        books, types = table.book[live].tolist(), table.type[live].tolist()
        extra = [{"book_id": table.book_ids[b], "type": table.types[t]} for b, t in zip(books, types, strict=True)]
        return [table.ids[r] for r in live.tolist()], index.embeddings, table.vec_row[live], extra
    counts = np.bincount(table.book[live], minlength=len(table.book_ids))
    sums = np.zeros((len(table.book_ids), index.dims), np.float64)
    np.add.at(sums, table.book[live], index.embeddings[table.vec_row[live]])
    order = sorted(np.flatnonzero(counts).tolist(), key=table.book_ids.__getitem__)
    means = sums[order] / counts[order, None] if order else np.zeros((0, index.dims))
    means /= np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-12)
    extra = [{"illustrations": int(counts[b])} for b in order]
    return [table.book_ids[b] for b in order], means.astype(np.float32), np.arange(len(order)), extra


@tool(
    "get_vectors",
    {
        "required": ["store"],
        "properties": {
            "store": {"type": "string", "minLength": 1},
            "after": {"type": "string", "description": "Cursor: the next_cursor of the previous page."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
            "format": {"enum": ["json", "base64"], "default": "json"},
        },
    },
)
async def get_vectors(
    services: Services, call: Call, store: str, after: str | None = None, limit: int = 100, format: str = "json"
) -> dict[str, Any]:
    """Embedding vectors of one store (books, gallery, clip, artworks) ordered by id, ``limit`` at a time after the
    cursor ``after``. ``format=base64`` encodes each embedding as float32 little-endian. Unknown store: not_found."""
    if store not in STORES:
        raise NotFound(
            f"There is no vector store {store!r}.",
            recovery=[f"Use one of: {', '.join(STORES)}."],
            details={"stores": list(STORES)},
        )
    snap = await engine_for(services).snapshot()
    ids, matrix, rows_of, extra = await snap.derive(f"vectors:{store}", lambda: _listing(snap, store))
    start = bisect.bisect_right(ids, after) if after else 0
    chosen = range(start, min(start + limit, len(ids)))
    rows = []
    for i in chosen:
        vector = matrix[rows_of[i]].astype("<f4")
        embedding: Any = base64.b64encode(vector.tobytes()).decode() if format == "base64" else vector.tolist()
        rows.append({"id": ids[i], **extra[i], "embedding": embedding})
    body: dict[str, Any] = {
        "store": store,
        "dims": int(matrix.shape[1]) if len(ids) else 0,
        "format": format,
        "total": len(ids),
        "returned": len(rows),
        "next_cursor": ids[chosen[-1]] if rows and chosen[-1] + 1 < len(ids) else None,
        "vectors": rows,
    }
    if not ids:
        body["empty"] = True
        body["message"] = EMPTY_REASON.get(store, EMPTY_REASON[None])
    return body
