"""Full-text search over illustrations (SQLite FTS5, migration 3): descriptions, museum descriptions, subjects,
figures and symbols, ranked by BM25."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["fts_expression", "text_search"]

_WORD = re.compile(r"\w+", re.UNICODE)


def fts_expression(query: str) -> str | None:
    """The FTS5 expression for free text: every word quoted (so no user input is FTS syntax), any word may match,
    the last one also as a prefix. ``None`` when the text has no word at all."""
    words = [w.lower() for w in _WORD.findall(query)][:32]
    if not words:
        return None
    terms = [f'"{w}"' for w in words]
    terms[-1] = f'"{words[-1]}"*'
    return " OR ".join(terms)


def text_search(catalog: Any, query: str, limit: int = 100_000) -> dict[str, float]:
    """``{illustration id: score}`` for matching illustrations (live or not: callers filter), score in (0, 1]:
    BM25 divided by the best match's, so 1.0 is the best text match of this query."""
    expression = fts_expression(query)
    if expression is None:
        return {}
    rows = catalog.query_all(
        "SELECT i.id AS id, bm25(illustrations_fts, 1.0, 0.6, 2.0, 2.0, 2.0) AS rank FROM illustrations_fts"
        " JOIN illustrations i ON i.rowid = illustrations_fts.rowid"
        " WHERE illustrations_fts MATCH ? ORDER BY rank LIMIT ?",
        (expression, limit),
    )
    if not rows:
        return {}
    best = -rows[0]["rank"] or 1.0  # bm25() is negative: more negative is better
    return {row["id"]: max(-row["rank"] / best, 1e-6) for row in rows}
