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
from imagesvc.search.engine import SearchEngine, engine_for
from imagesvc.services import Services
from imagesvc.tools import Call, tool

__all__ = ["STORES", "get_vectors"]

STORES = ("books", "gallery", "clip", "artworks")
EMPTY_REASON = {
    "artworks": "This service holds no artwork vectors; artworks are indexed by another service.",
    None: "No vectors yet: CLIP is off or `imagesvc index` has not run (see the search status).",
}


def _listing(engine: SearchEngine, store: str) -> tuple[list[str], np.ndarray, list[dict[str, Any]]]:
    """(sorted ids, their vectors, per-row extra fields) of one store."""
    index = engine.index()
    if store == "artworks" or index is None or not engine.clip_ready(index) or not index.ids:
        return [], np.zeros((0, 0), np.float32), []
    table = engine.table()
    if store == "clip":
        order = sorted(range(len(index.ids)), key=index.ids.__getitem__)
        ids = [index.ids[i] for i in order]
        return ids, index.embeddings[order], [{"content_hash": index.hashes[i]} for i in order]
    assert table.vec_row is not None
    live = [r for r in range(len(table)) if table.live[r] and table.vec_row[r] >= 0]
    if store == "gallery":
        live.sort(key=table.ids.__getitem__)
        extra = [{"book_id": table.book_ids[table.book[r]], "type": table.types[table.type[r]]} for r in live]
        return [table.ids[r] for r in live], index.embeddings[table.vec_row[live]], extra
    books: dict[str, list[int]] = {}
    for r in live:
        books.setdefault(table.book_ids[table.book[r]], []).append(int(table.vec_row[r]))
    ids = sorted(books)
    means = np.stack([index.embeddings[books[b]].mean(axis=0) for b in ids]) if ids else np.zeros((0, index.dims))
    means /= np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-12)
    return ids, means.astype(np.float32), [{"illustrations": len(books[b])} for b in ids]


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
    engine = engine_for(services)
    ids, vectors, extra = engine.memo(f"vectors:{store}", lambda: _listing(engine, store))
    start = bisect.bisect_right(ids, after) if after else 0
    chosen = range(start, min(start + limit, len(ids)))
    rows = []
    for i in chosen:
        vector = vectors[i].astype("<f4")
        embedding: Any = base64.b64encode(vector.tobytes()).decode() if format == "base64" else vector.tolist()
        rows.append({"id": ids[i], **extra[i], "embedding": embedding})
    body: dict[str, Any] = {
        "store": store,
        "dims": int(vectors.shape[1]) if len(ids) else 0,
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
