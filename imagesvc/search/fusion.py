"""How gallery text queries are read and how the keyword and dense-text rankings are fused into one score.

**Negative terms**: a word written ``-word`` in the query (or given in ``exclude``) removes every illustration whose
text matches it as a keyword (FTS5, so ``-map`` also drops "maps"); the remaining words are what is searched for.

**Fusion** is a weighted sum of scores on fixed scales, not reciprocal rank fusion: ``text = dense + W_FTS × fts``,
where ``dense`` is the cosine of the query's and the illustration's MiniLM embeddings (in [-1, 1], about 0.5 to 0.7
for a good match, under 0.2 for an unrelated one) and ``fts`` is BM25 divided by the query's best (in (0, 1]). A sum
keeps a score that means the same from one query to the next, so ``min_score`` stays a threshold a person can pick;
rank fusion would discard how far apart two results are. ``W_FTS`` and ``DENSE_FLOOR`` were chosen on the
evaluation set (benchmarks/search_eval.py, docs/search.md). Candidates with no keyword match and a cosine under
``DENSE_FLOOR`` are not results at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

__all__ = ["DENSE_FLOOR", "W_FTS", "Fused", "ParsedQuery", "fuse_rows", "parse_query"]

W_FTS = 0.1
DENSE_FLOOR = 0.15
_NEGATIVE = re.compile(r'(?:^|\s)-(?:"([^"]+)"|(\w[\w\'-]*))', re.UNICODE)
_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True)
class ParsedQuery:
    positive: str | None  # what to search for, negative terms removed (None: nothing left)
    negative: tuple[str, ...]  # words and quoted phrases that exclude an illustration


def parse_query(text: str | None, exclude: str | None = None) -> ParsedQuery:
    """Split ``text`` into what is searched for and ``-word`` / ``-"a phrase"`` exclusions; ``exclude`` adds
    more exclusions (words separated by commas or spaces; quoted phrases kept whole)."""
    negative: list[str] = []
    positive = None
    if text:
        negative += [(phrase or word).strip() for phrase, word in _NEGATIVE.findall(text)]
        positive = " ".join(_NEGATIVE.sub(" ", text).split()) or None
    if exclude:
        phrases = re.findall(r'"([^"]+)"', exclude)
        rest = re.sub(r'"[^"]+"', " ", exclude)
        negative += phrases + [w for w in re.split(r"[,\s]+", rest) if _WORD.search(w)]
    seen: dict[str, None] = {}
    for term in negative:
        if _WORD.search(term):
            seen.setdefault(term.casefold(), None)
    return ParsedQuery(positive, tuple(seen))


@dataclass(frozen=True)
class Fused:
    """The text results of a query as table rows: ``rows`` and their fused ``scores`` (``text = dense + W_FTS x
    fts``), and every row's dense cosine (NaN for a row the dense index lacks) with whether it is a result."""

    rows: np.ndarray
    scores: np.ndarray
    cosine: np.ndarray
    result: np.ndarray

    def dense_of(self, row: int) -> float | None:
        """The dense cosine behind row ``row``'s result, or ``None`` (not a result, or no dense score)."""
        value = self.cosine[row]
        return float(value) if self.result[row] and value == value else None


def fuse_rows(size: int, rows: np.ndarray, dense: np.ndarray, hit_rows: np.ndarray, hit_scores: np.ndarray) -> Fused:
    """Keyword and dense scores fused over a table of ``size`` rows, in arrays: ``dense`` holds the cosines of the
    dense index's illustrations, ``rows`` the table row of each (-1 for one the table lacks); ``hit_rows`` and
    ``hit_scores`` are the keyword matches. A result is a keyword match, or a cosine of at least ``DENSE_FLOOR``; a
    match the dense index lacks scores its keyword part alone. Arrays, not dicts: at 200,000 illustrations e5's
    cosines put most of them over the floor, and a dict of each cost more than the ranking. The scores are float32,
    as ``rank`` reads them; a match's sum is taken in float64 first."""
    cosine = np.full(size, np.nan, np.float32)
    known = rows >= 0
    cosine[rows[known]] = dense[known]
    result = cosine >= DENSE_FLOOR  # NaN: False
    result[hit_rows] = True
    out = np.flatnonzero(result)
    scores = cosine[out]
    if len(hit_rows):  # the matches, few beside the rest: their sums one by one
        base = cosine[hit_rows].astype(np.float64)
        sums = np.where(np.isnan(base), 0.0, base) + W_FTS * np.asarray(hit_scores, np.float64)
        scores[np.searchsorted(out, hit_rows)] = sums
    return Fused(out, scores, cosine, result)
