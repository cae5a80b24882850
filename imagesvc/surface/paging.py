"""The one paging envelope every list answer uses: ``{items, total, limit, offset, has_more, next_cursor}``."""

from __future__ import annotations

from typing import Any

__all__ = ["envelope"]


def envelope(
    items: list[Any],
    *,
    total: int,
    limit: int,
    offset: int = 0,
    has_more: bool | None = None,
    next_cursor: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A list answer: ``items`` of this page, the ``total`` that match, the ``limit`` and ``offset`` it was cut with,
    ``has_more`` (from the counts unless given) and ``next_cursor`` (a keyset cursor where offsets cannot reach, else
    None). ``extra`` keys (a listing's context, such as the book) come first."""
    return {
        **extra,
        "items": items,
        "total": total,
        "limit": limit,
        "offset": offset,
        "has_more": offset + len(items) < total if has_more is None else has_more,
        "next_cursor": next_cursor,
    }
