"""The PostgreSQL form of the illustration text search (``imagesvc.search.text`` keeps the SQLite FTS5 one): the
GIN-indexed weighted tsvector of migration 3, stored in ``illustrations.search_doc`` since migration 10, ranked by
``ts_rank`` with the FTS5 weights' proportions; matches are named by ``illustrations.search_num`` (migration 12)."""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

import numpy as np

__all__ = ["DOC", "folded_words", "postgres_keyword_numbers", "postgres_matching_rows", "quoted"]

_WORD = re.compile(r"\w+", re.UNICODE)
DOC = "i.search_doc"  # imagesvc_illustration_doc(description, museum_description, subjects, figures, symbols)
_WEIGHTS = "'{0.05, 0.3, 0.5, 1.0}'"  # D (unused), C museum description, B description, A: FTS5's 0.6:1:2


def folded_words(catalog: Any, text: str) -> list[str]:
    """The words of ``text`` (runs of letters and digits, lower-cased) as the server's index folds it: ``text`` goes
    through ``imagesvc_fold`` (unaccent) before it is split and any word is quoted. Folding after quoting broke the
    quoting: unaccent writes some letters as tsquery syntax (the ALA-LC apostrophes U+02BC and U+02BB as ``'``, U+0149
    as ``'n``), which ended a quoted term early, a syntax error. Folded first, ``Qurʼan`` is ``qur'an``, read as
    ``qur`` and ``an``, as the index reads the same text. unaccent's rules map no ASCII character, so ASCII text is
    its own folding and costs no round trip."""
    if not text.isascii():
        text = catalog.query_one("SELECT imagesvc_fold(?) AS folded", (text,))["folded"]
    return [w.lower() for w in _WORD.findall(text)]


def quoted(words: list[str]) -> list[str]:
    """Each word as a quoted tsquery term. A word from ``folded_words`` is letters and digits only: it holds no quote
    or backslash to end or escape its quotes, and nothing folds it again after quoting."""
    return ["'" + w + "'" for w in words]


def postgres_keyword_numbers(
    catalog: Any, query: str, stop_words: Collection[str], limit: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """``(search numbers, ts_rank, gallery_changes seq)`` of matching illustrations, best first where more than
    ``limit`` match (then only the best ``limit``), else in no order; any word may match, the last also as a prefix;
    function words are dropped unless the query holds nothing else. The change number is read by the same statement,
    so from the same snapshot as the matches (a gallery table read at it maps the numbers to its rows).

    One row comes back, not one a match: the numbers as one array and the ranks as one text (each rank as the
    server writes a ``real``, the text the row-by-row read parsed, so the scores are the same to the last bit)."""
    words = folded_words(catalog, query)[:32]
    if not words:
        return np.zeros(0, np.int64), np.zeros(0), 0
    words = [w for w in words if w not in stop_words] or words
    terms = quoted(words)
    terms[-1] += ":*"
    matches = (
        f"SELECT i.search_num AS n, ts_rank({_WEIGHTS}, {DOC}, q) AS r FROM illustrations i,"
        f" to_tsquery('simple', ?) AS q WHERE {DOC} @@ q"
    )
    expression = " | ".join(terms)
    numbers, ranks, seq = _aggregated(catalog, matches + " LIMIT ?", (expression, limit + 1))
    if len(numbers) > limit:  # only then does the order matter: sorting every match cost more than ranking it
        numbers, ranks, seq = _aggregated(catalog, matches + " ORDER BY r DESC, i.id LIMIT ?", (expression, limit))
    return numbers, ranks, seq


def _aggregated(catalog: Any, matches: str, args: tuple[Any, ...]) -> tuple[np.ndarray, np.ndarray, int]:
    numbers, ranks, seq = catalog.tuples(
        "SELECT array_agg(n), string_agg(r::text, ' '), (SELECT coalesce(max(seq), 0) FROM gallery_changes)"
        f" FROM ({matches}) AS found",
        args,
    )[0]
    if not numbers:
        return np.zeros(0, np.int64), np.zeros(0), int(seq)
    return np.array(numbers, np.int64), np.array(ranks.split(" "), np.float64), int(seq)


def postgres_matching_rows(catalog: Any, words: list[str]) -> list[dict[str, Any]]:
    """Rows (``id``) of illustrations whose text holds ``words`` in order, the last also as a prefix."""
    terms = quoted(folded_words(catalog, " ".join(words)))
    if not terms:
        return []
    terms[-1] += ":*"
    return catalog.query_all(
        f"SELECT i.id AS id FROM illustrations i WHERE {DOC} @@ to_tsquery('simple', ?)", (" <-> ".join(terms),)
    )
