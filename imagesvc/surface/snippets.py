"""Snippets of a matching page: the words of a query found in raw page text, and a short window around them.

Matching folds each character the way the index folds text (``text_fold.fold_char``), so a query without points
finds pointed Hebrew, ``secretae`` finds ``ſecretæ``'s ``ſ`` and ``métaux`` finds ``METAVX``'s neighbours; offsets
are kept in the raw text, so a snippet is a verbatim slice of the page and its highlights point into it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from imagesvc.catalog.text_fold import Word, fold_char, is_cjk

__all__ = ["SNIPPET_CHARS", "locate", "snippet"]

SNIPPET_CHARS = 240  # about three lines of a printed page


class _FoldTable(dict[int, str]):
    """``str.translate`` table folding as ``fold_char`` does, filled on first sight of each character."""

    def __missing__(self, code: int) -> str:
        self[code] = folded = fold_char(chr(code))
        return folded


_TABLE = _FoldTable()


def _raw_offset(text: str, position: int) -> int:
    """The raw index of the character that folded position ``position`` came from (bisecting on folded prefix
    lengths: each step is one C-speed ``translate``, so a long page is never walked in Python)."""
    low, high = 0, len(text)
    while low < high:  # the smallest i whose folded prefix text[: i + 1] reaches past position
        mid = (low + high) // 2
        if len(text[: mid + 1].translate(_TABLE)) > position:
            high = mid
        else:
            low = mid + 1
    return low


def _folded(text: str) -> tuple[str, list[int]]:
    """``text`` folded character by character, and for each folded character the raw offset it came from."""
    if text.isascii():
        return text.lower(), list(range(len(text)))
    out: list[str] = []
    where: list[int] = []
    table = _TABLE
    for i, char in enumerate(text):
        piece = table[ord(char)]
        out.append(piece)
        where.extend([i] * len(piece))
    return "".join(out), where


def _pattern(words: list[Word]) -> re.Pattern[str]:
    """One regex for every word: a phrase's tokens apart by any non-token run (none between CJK characters). Whole
    tokens are checked by ``_matches`` (a lookbehind in the pattern made every search ~4x slower)."""
    alternatives = []
    for word in words:
        first, *rest = word.tokens
        body = re.escape(first)
        for i, (before, token) in enumerate(zip(word.tokens, rest, strict=False), 1):
            cjk = is_cjk(before) + is_cjk(token)
            if cjk == 2 and i in word.apart:  # CJK words the query wrote apart: a space or a mark may stand between
                cjk = 1
            gap = (r"[\W_]+", r"[\W_]*", "")[cjk]  # between adjacent CJK characters, none
            body += gap + re.escape(token)
        alternatives.append(body)
    return re.compile("|".join(sorted(alternatives, key=len, reverse=True)))


def _token_char(text: str, at: int) -> bool:
    return 0 <= at < len(text) and text[at].isalnum()


def _matches(pattern: re.Pattern[str], folded: str, start: int = 0) -> Iterator[tuple[int, int]]:
    """The spans of ``pattern`` in ``folded`` that are whole tokens (a CJK end needs no boundary)."""
    for match in pattern.finditer(folded, start):
        a, b = match.span()
        if b > a and not (
            (not is_cjk(folded[a]) and _token_char(folded, a - 1))
            or (not is_cjk(folded[b - 1]) and _token_char(folded, b))
        ):
            yield a, b


def locate(text: str, words: list[Word]) -> list[tuple[int, int]]:
    """``[(start, end)]`` raw-text spans where any of ``words`` occurs, in order."""
    if not words or not text:
        return []
    folded, where = _folded(text)
    return [(where[a], where[b - 1] + 1) for a, b in _matches(_pattern(words), folded)]


def snippet(text: str, words: list[Word], width: int = SNIPPET_CHARS) -> dict[str, Any] | None:
    """A window of about ``width`` characters of ``text`` around its first match, cut at spaces where there are any,
    with ``highlights``: ``[start, end]`` offsets of every match inside the window. None when nothing matches."""
    if not words or not text:
        return None
    pattern = _pattern(words)
    folded = text.lower() if text.isascii() else text.translate(_TABLE)
    found = next(_matches(pattern, folded), None)
    if found is None:
        return None
    # one folded character per raw one (ASCII, Latin with accents or long s, Chinese): offsets are the same
    same = len(folded) == len(text)
    first = found[0] if same else _raw_offset(text, found[0])
    last = found[1] if same else _raw_offset(text, found[1] - 1) + 1
    start = max(0, first - width // 3)
    end = min(len(text), max(start + width, last))  # a long match (a quoted passage) is shown whole
    spans = locate(text[start:end], words)  # only the window is walked character by character
    if not spans:
        return None
    trimmed = start
    if start > 0 and (space := text.find(" ", start, start + spans[0][0])) != -1:
        trimmed = space + 1  # begin and end at word boundaries where the text has spaces
    if end < len(text) and (space := text.rfind(" ", start + spans[0][1], end)) != -1:
        end = space
    inside = [[a + start - trimmed, b + start - trimmed] for a, b in spans if start + a >= trimmed and start + b <= end]
    start, window = trimmed, text[trimmed:end]
    return {
        "text": ("…" if start > 0 else "") + window + ("…" if end < len(text) else ""),
        "highlights": [[a + (start > 0), b + (start > 0)] for a, b in inside],
    }
