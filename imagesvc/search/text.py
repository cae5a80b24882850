"""Full-text search over illustrations (SQLite FTS5, migration 3): descriptions, museum descriptions, subjects,
figures and symbols, ranked by BM25."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["STOP_WORDS", "fts_expression", "matching_ids", "text_search"]

_WORD = re.compile(r"\w+", re.UNICODE)
# Function words match nearly every description, so in an any-word query they only add noise; a query made of
# nothing else is still searched as written.
STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "has",
        "have",
        "in",
        "into",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "their",
        "this",
        "to",
        "was",
        "were",
        "which",
        "with",
        "without",
    ]
)


def fts_expression(query: str) -> str | None:
    """The FTS5 expression for free text: every word quoted (so no user input is FTS syntax), any word may match,
    the last one also as a prefix. ``None`` when the text has no word at all."""
    words = [w.lower() for w in _WORD.findall(query)][:32]
    if not words:
        return None
    words = [w for w in words if w not in STOP_WORDS] or words
    terms = [f'"{w}"' for w in words]
    terms[-1] = f'"{words[-1]}"*'
    return " OR ".join(terms)


def text_search(catalog: Any, query: str, limit: int = 100_000) -> dict[str, float]:
    """``{illustration id: score}`` for matching illustrations (live or not: callers filter), score in (0, 1]:
    BM25 divided by the best match's, so 1.0 is the best text match of this query."""
    expression = fts_expression(query)
    if expression is None:
        return {}
    if getattr(catalog, "dialect", "sqlite") == "postgres":
        from imagesvc.catalog.search_sql import postgres_text_search

        return postgres_text_search(catalog, query, STOP_WORDS, limit)
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


def matching_ids(catalog: Any, term: str) -> set[str]:
    """Ids of illustrations whose text or type holds ``term`` (a word, or a phrase: its words in order), the last word
    also as a prefix, so "map" matches "maps". Nothing for a term with no word."""
    words = [w.lower() for w in _WORD.findall(term)][:16]
    if not words:
        return set()
    expression = '"' + " ".join(words) + '"*'
    if getattr(catalog, "dialect", "sqlite") == "postgres":
        from imagesvc.catalog.search_sql import postgres_matching_rows

        rows = postgres_matching_rows(catalog, words)
    else:
        rows = catalog.query_all(
            "SELECT i.id AS id FROM illustrations_fts JOIN illustrations i ON i.rowid = illustrations_fts.rowid"
            " WHERE illustrations_fts MATCH ?",
            (expression,),
        )
    found = {row["id"] for row in rows}
    # The type ("map", "woodcut") is not in the FTS table but is part of what an illustration says it is.
    pattern = re.compile(r"\b" + r"\W+".join(map(re.escape, words)) + r"\w*", re.IGNORECASE | re.UNICODE)
    typed = catalog.query_all("SELECT id, type FROM illustrations WHERE lower(type) LIKE ?", (f"%{words[0]}%",))
    return found | {row["id"] for row in typed if pattern.search(row["type"] or "")}
