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
from itertools import repeat

import numpy as np

__all__ = ["DENSE_FLOOR", "W_FTS", "ParsedQuery", "fuse", "parse_query"]

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


def fuse(ids: list[str], dense: np.ndarray | None, fts: dict[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """``({id: fused text score}, {id: dense cosine})`` for the illustrations that are results: a keyword match,
    or a dense cosine of at least ``DENSE_FLOOR``. ``ids`` name the rows of ``dense`` (cosines with the query)."""
    if dense is None:
        return dict(fts), {}
    keep = np.flatnonzero(dense >= DENSE_FLOOR)
    cos = dict(zip(map(ids.__getitem__, keep.tolist()), dense[keep].tolist(), strict=True))
    if fts:
        where = _positions(ids)
        for iid in fts:
            n = where.get(iid)
            if n is not None:
                cos.setdefault(iid, float(dense[n]))
    keyword = np.fromiter(map(fts.get, cos, repeat(0.0)), np.float64, len(cos))
    values = np.fromiter(cos.values(), np.float64, len(cos)) + W_FTS * keyword
    fused = dict(zip(cos, values.tolist(), strict=True))
    for iid, s in fts.items():  # a keyword match the text model has no row for yet (embedded on the next sync)
        fused.setdefault(iid, W_FTS * s)
    return fused, cos


_last: tuple[list[str], dict[str, int]] | None = None


def _positions(ids: list[str]) -> dict[str, int]:
    """``{id: row}`` of ``ids``; the last one is kept (it holds its list, so identity is a safe key), since queries
    fuse against the same dense index's ids until it is rebuilt."""
    global _last
    hit = _last
    if hit is None or hit[0] is not ids or len(hit[1]) != len(ids):
        hit = _last = (ids, {iid: n for n, iid in enumerate(ids)})
    return hit[1]
