"""The answer of a search inside a book from a dialect's look-ups (shared by SQLite's ``page_text`` and PostgreSQL's
``page_text_sql``), and the work one search may do.

Its cost is linear in the query's distinct words: a word or phrase asked twice is asked once, each distinct term is
looked up once, and the texts a phrase must be checked in are read once (in batches), folded once and checked for
every phrase of the query there, only on the pages that hold every word's terms. ``SearchWork`` counts that work in
units of about a microsecond of CPU each; past its limit the search stops with ``SearchTooCostly`` (a 400: the same
query on the same book always costs the same, so a retry cannot help, a narrower query can). The phrase checks, the
costly part, are priced at their most before any text is read, so such a query is refused after its index look-ups.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import groupby, pairwise

from imagesvc.catalog.text_fold import Word, fold, is_cjk
from imagesvc.errors import InvalidRequest

__all__ = ["FIELDS", "FIELD_BITS", "READ_BATCH", "WORK_LIMIT", "Phrase", "SearchTooCostly", "SearchWork", "rank"]

FIELDS = ("ocr", "translation", "original")
FIELD_BITS = 2
READ_BATCH = 500  # texts read in one query when checking phrases (~1 MB of text at the library's ~2 KB a text)
# Units a search may spend: an ordinary query on the longest books (a quoted phrase of common words on 1,500 pages,
# every text read: ~70,000) fits many times over; 32 phrases of common words on such a book (~600,000) do not.
WORK_LIMIT = 300_000


class SearchTooCostly(InvalidRequest):
    """A query whose search would do more work than one request may (``SearchWork``)."""

    def __init__(self, spent: int, limit: int) -> None:
        super().__init__(
            f"This query asks for more work than one search may do in this book ({spent:,} units of {limit:,}).",
            recovery=[
                "Ask for fewer phrases, or for rarer words: each common word or phrase is checked on every page "
                "that holds it.",
                "Search one text (field=ocr, translation or original) instead of all three.",
            ],
            details={"argument": "q", "work": spent, "work_limit": limit},
        )


@dataclass
class SearchWork:
    """The work one search did, counted as it goes; ``limit`` (None: unbounded) stops it with ``SearchTooCostly``.

    Units (about a microsecond of CPU each): a term looked up in the index costs ``LOOKUP``, each of the book's
    texts it names ``ENTRY``; a text read to check a phrase ``TEXT``; one phrase checked in one text ``CHECK``."""

    LOOKUP = 50
    ENTRY = 1
    TEXT = 10
    CHECK = 3

    limit: int | None = WORK_LIMIT
    lookups: int = 0
    entries: int = 0
    texts_read: int = 0
    checks: int = 0

    def cost(self, *, lookups: int = 0, entries: int = 0, texts_read: int = 0, checks: int = 0) -> int:
        """The units of the work named."""
        return lookups * self.LOOKUP + entries * self.ENTRY + texts_read * self.TEXT + checks * self.CHECK

    @property
    def spent(self) -> int:
        return self.cost(lookups=self.lookups, entries=self.entries, texts_read=self.texts_read, checks=self.checks)

    def afford(self, **work: int) -> None:
        """``SearchTooCostly`` unless the work named (``cost``'s arguments) fits in what is left: asked before
        reading any text, with the most the phrase checks can cost, so a query past the limit is refused early."""
        if self.limit is not None and self.spent + self.cost(**work) > self.limit:
            raise SearchTooCostly(self.spent + self.cost(**work), self.limit)

    def charge(self, *, lookups: int = 0, entries: int = 0, texts_read: int = 0, checks: int = 0) -> None:
        """Count work just done; ``SearchTooCostly`` once the total passes the limit."""
        self.lookups += lookups
        self.entries += entries
        self.texts_read += texts_read
        self.checks += checks
        if self.limit is not None and self.spent > self.limit:
            raise SearchTooCostly(self.spent, self.limit)


class Phrase:
    """A word whose tokens must stand in order (``Word.ordered``), checked in folded text as ``Word.in_folded``
    checks it, with one pattern compiled per search. The pattern begins with the phrase's first token, so the regex
    engine scans for that literal at C speed; ``in_folded``'s leading look-behind made it try every position, ~7x
    slower. The token boundary before the match is checked here instead."""

    def __init__(self, word: Word) -> None:
        tokens = word.tokens
        gaps = [r"[\W_]*" if is_cjk(a) or is_cjk(b) else r"[\W_]+" for a, b in pairwise(tokens)]
        body = re.escape(tokens[0]) + "".join(g + re.escape(t) for g, t in zip(gaps, tokens[1:], strict=False))
        self._pattern = re.compile(body + r"(?![^\W_])")

    def found_in(self, folded: str) -> bool:
        """Whether ``folded`` (text passed through ``fold``) holds the phrase, as whole tokens."""
        search = self._pattern.search
        at = 0
        while (match := search(folded, at)) is not None:
            start = match.start()
            if start == 0 or not folded[start - 1].isalnum():  # [^\W_] is isalnum()
                return True
            at = start + 1  # a later match may overlap this one
        return False


def _best_first(item: tuple[int, float]) -> tuple[float, int]:
    return -item[1], item[0]


def _check_phrases(
    phrases: list[tuple[set[int], Phrase]], read: Callable[[set[int]], dict[int, str]], work: SearchWork
) -> None:
    """Keep in each phrase's texts only those that hold it in order: every text any phrase needs is read once (in
    batches of ``READ_BATCH``) and folded once; a page that lacks one phrase in all its texts is checked no further. The
    most this can cost is asked of ``work`` first."""
    keys = sorted(set().union(*(rows for rows, _ in phrases)))
    work.afford(texts_read=len(keys), checks=sum(len(rows) for rows, _ in phrases))
    by_page = [list(page_keys) for _, page_keys in groupby(keys, key=lambda key: key >> FIELD_BITS)]
    step = max(1, READ_BATCH // len(FIELDS))  # whole pages a batch: a page is judged on all its texts at once
    for at in range(0, len(by_page), step):
        pages = by_page[at : at + step]
        batch = {key for page_keys in pages for key in page_keys}
        work.charge(texts_read=len(batch))
        texts = read(batch)
        for page_keys in pages:
            folded: dict[int, str] = {}  # each text folded once, when a phrase first needs it
            for rows, phrase in phrases:
                held = [key for key in page_keys if key in rows]
                work.charge(checks=len(held))
                for key in held:
                    if key not in folded:
                        folded[key] = fold(texts.get(key) or "")
                missing = [key for key in held if not phrase.found_in(folded[key])]
                rows.difference_update(missing)
                if len(missing) == len(held):  # the page lacks this phrase: it cannot match, stop checking it
                    for other, _ in phrases:
                        other.difference_update(page_keys)
                    break


def rank(
    words: Sequence[Word],
    texts: Callable[[str], set[int]],
    read: Callable[[set[int]], dict[int, str]],
    *,
    limit: int,
    offset: int,
    work: SearchWork | None = None,
) -> tuple[list[tuple[int, float, tuple[str, ...]]], int]:
    """``([(page number, score, texts)], total)`` from a dialect's look-ups: ``texts(term)`` gives the keys
    (``page << FIELD_BITS | field``) of the book's wanted texts holding the term, ``read(keys)`` those texts as stored
    (one query on PostgreSQL, where each statement is a round trip). ``work`` counts what it does (see the module).

    A quoted phrase (or ``golden-age``) must stand in order: its texts are read to check. A repeated word counts
    once. The score is the number of the page's texts that hold every word, plus a tenth for each text holding one
    of them; ties go in page order."""
    work = work if work is not None else SearchWork(limit=None)
    words = list(dict.fromkeys(words))  # a word or phrase asked twice is looked for once
    holding: dict[str, set[int]] = {}
    for term in dict.fromkeys(term for word in words for term in word.terms):
        holding[term] = texts(term)
        work.charge(lookups=1, entries=len(holding[term]))
    per_word = [set.intersection(*(holding[t] for t in word.terms)) for word in words]  # texts holding the word
    # Only a page holding every word's terms can match: no other text needs checking, or counting.
    pages = set.intersection(*({row >> FIELD_BITS for row in rows} for rows in per_word))
    per_word = [{row for row in rows if row >> FIELD_BITS in pages} for rows in per_word]
    phrases = [(rows, Phrase(word)) for word, rows in zip(words, per_word, strict=True) if word.ordered]
    if phrases:
        _check_phrases(phrases, read, work)
    matching = set.intersection(*({row >> FIELD_BITS for row in rows} for rows in per_word))
    score = dict.fromkeys(matching, 0.0)
    for rows in per_word:
        for row in rows:
            if (page := row >> FIELD_BITS) in score:
                score[page] += 0.1
    for row in set.intersection(*per_word):  # texts holding every word
        score[row >> FIELD_BITS] += 1
    ranked = sorted(((page, round(points, 1)) for page, points in score.items()), key=_best_first)
    shown = ranked[offset : offset + limit]
    held = {row for rows in per_word for row in rows}
    out = []
    for page, points in shown:
        base = page << FIELD_BITS
        out.append((page, points, tuple(f for i, f in enumerate(FIELDS) if base | i in held)))
    return out, len(ranked)
