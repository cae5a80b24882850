"""Full-text search over illustrations (SQLite FTS5, migration 3): descriptions, museum descriptions, subjects,
figures and symbols, ranked by BM25."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "STOP_WORDS",
    "KeywordHits",
    "fts_expression",
    "ids_of_rowids",
    "keyword_hits",
    "matching_ids",
    "text_search",
]

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


@dataclass(frozen=True)
class KeywordHits:
    """The illustrations a keyword query matches (live or not: callers filter) with their scores in (0, 1], BM25
    (SQLite) or ts_rank (PostgreSQL) divided by the best match's, so 1.0 is the query's best text match. Named by
    ``ids``, or by ``rowids`` (FTS5's on SQLite, ``search_num`` on PostgreSQL) with the ``seq`` of ``gallery_changes``
    they were read at (a gallery table read at the same ``seq`` maps them to its rows without reading an id)."""

    scores: np.ndarray  # float64
    ids: list[str] | None = None
    rowids: np.ndarray | None = None  # int64
    seq: int | None = None

    def __len__(self) -> int:
        return len(self.scores)

    def as_dict(self, catalog: Any = None) -> dict[str, float]:
        """``{illustration id: score}`` (rowids are turned into ids through ``catalog``)."""
        ids = self.ids
        if ids is None:
            ids = ids_of_rowids(catalog, self.rowids) if len(self.scores) else []
        return dict(zip(ids, self.scores.tolist(), strict=True))


_BM25 = "bm25(illustrations_fts, 1.0, 0.6, 2.0, 2.0, 2.0)"


def keyword_hits(catalog: Any, query: str, limit: int = 100_000) -> KeywordHits:
    """The illustrations matching ``query`` (any word, the last also as a prefix) and their scores, at most ``limit``
    (the best, when more match). One statement; blocking: call it in a worker thread on a reader's connection."""
    expression = fts_expression(query)
    if expression is None:
        return KeywordHits(np.zeros(0))
    if getattr(catalog, "dialect", "sqlite") == "postgres":
        from imagesvc.catalog.search_sql import postgres_keyword_numbers

        rowids, ranks, seq = postgres_keyword_numbers(catalog, query, STOP_WORDS, limit)
        if not len(ranks):
            return KeywordHits(np.zeros(0))
        best = float(ranks.max()) or 1.0
        return KeywordHits(np.maximum(ranks / best, 1e-6), rowids=rowids, seq=seq)
    # The change number comes from the same statement, so from the same read of the file as the rowids.
    sql = (
        f"SELECT rowid, {_BM25}, (SELECT coalesce(max(seq), 0) FROM gallery_changes) FROM illustrations_fts"
        " WHERE illustrations_fts MATCH ?"
    )
    rows = catalog.tuples(sql + " LIMIT ?", (expression, limit + 1))
    if len(rows) > limit:  # only then does the order matter: sorting every match cost more than scoring it
        rows = catalog.tuples(sql + " ORDER BY 2 LIMIT ?", (expression, limit))
    if not rows:
        return KeywordHits(np.zeros(0))
    rowids = np.fromiter((r[0] for r in rows), np.int64, len(rows))
    ranks = np.fromiter((r[1] for r in rows), np.float64, len(rows))
    best = -float(ranks.min()) or 1.0  # bm25() is negative: more negative is better
    return KeywordHits(np.maximum(-ranks / best, 1e-6), rowids=rowids, seq=int(rows[0][2]))


def ids_of_rowids(catalog: Any, rowids: Any) -> list[str]:
    """The illustration id of each rowid (SQLite's, or PostgreSQL's ``search_num``; "" for one deleted since)."""
    if getattr(catalog, "dialect", "sqlite") == "postgres":  # one statement, an array (not 500 numbers a query)
        sql = "SELECT search_num, id FROM illustrations WHERE search_num = ANY(?)"
        found = dict(catalog.tuples(sql, (rowids.tolist(),)))
    else:
        sql = "SELECT rowid, id FROM illustrations WHERE rowid IN ({marks})"
        found = dict((r["rowid"], r["id"]) for r in catalog.query_in(sql, rowids.tolist()))
    return [found.get(r, "") for r in rowids.tolist()]


def text_search(catalog: Any, query: str, limit: int = 100_000) -> dict[str, float]:
    """``{illustration id: score}`` for matching illustrations (live or not: callers filter), score in (0, 1]:
    BM25 divided by the best match's, so 1.0 is the best text match of this query."""
    hits = keyword_hits(catalog, query, limit)
    out = hits.as_dict(catalog)
    out.pop("", None)  # a row deleted between the two reads
    return out


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
