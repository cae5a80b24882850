"""The PostgreSQL form of the illustration text search (``imagesvc.search.text`` keeps the SQLite FTS5 one): the
GIN-indexed weighted tsvector of migration 3, stored in ``illustrations.search_doc`` since migration 10, ranked by
``ts_rank`` with the FTS5 weights' proportions."""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

__all__ = ["DOC", "postgres_keyword_rows", "postgres_matching_rows", "postgres_text_search"]

_WORD = re.compile(r"\w+", re.UNICODE)
DOC = "i.search_doc"  # imagesvc_illustration_doc(description, museum_description, subjects, figures, symbols)
_WEIGHTS = "'{0.05, 0.3, 0.5, 1.0}'"  # D (unused), C museum description, B description, A: FTS5's 0.6:1:2


def _terms(words: list[str]) -> list[str]:
    return ["'" + w + "'" for w in words]


def postgres_keyword_rows(catalog: Any, query: str, stop_words: Collection[str], limit: int) -> list[tuple[str, float]]:
    """``(illustration id, ts_rank)`` of matching illustrations, best first where more than ``limit`` match (then
    only the best ``limit``), else in no order; any word may match, the last also as a prefix; function words are
    dropped unless the query holds nothing else."""
    words = [w.lower() for w in _WORD.findall(query)][:32]
    if not words:
        return []
    words = [w for w in words if w not in stop_words] or words
    terms = _terms(words)
    terms[-1] += ":*"
    sql = (
        f"SELECT i.id, ts_rank({_WEIGHTS}, {DOC}, q) AS rank FROM illustrations i,"
        f" to_tsquery('simple', imagesvc_fold(?)) AS q WHERE {DOC} @@ q"
    )
    rows = catalog.tuples(sql + " LIMIT ?", (" | ".join(terms), limit + 1))
    if len(rows) > limit:  # only then does the order matter: sorting every match cost more than ranking it
        rows = catalog.tuples(sql + " ORDER BY rank DESC, i.id LIMIT ?", (" | ".join(terms), limit))
    return rows


def postgres_text_search(catalog: Any, query: str, stop_words: Collection[str], limit: int) -> dict[str, float]:
    """``{illustration id: score}``, score in (0, 1] relative to the best match (``postgres_keyword_rows``)."""
    rows = postgres_keyword_rows(catalog, query, stop_words, limit)
    if not rows:
        return {}
    best = max(rank for _, rank in rows) or 1.0
    return {iid: max(rank / best, 1e-6) for iid, rank in rows}


def postgres_matching_rows(catalog: Any, words: list[str]) -> list[dict[str, Any]]:
    """Rows (``id``) of illustrations whose text holds ``words`` in order, the last also as a prefix."""
    terms = _terms(words)
    terms[-1] += ":*"
    return catalog.query_all(
        f"SELECT i.id AS id FROM illustrations i WHERE {DOC} @@ to_tsquery('simple', imagesvc_fold(?))",
        (" <-> ".join(terms),),
    )
