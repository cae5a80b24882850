"""Snippets of a matching page: the words of a query found in raw page text, and a short window around them.

Matching folds each character the way the index folds text (``text_fold.fold_char``), so a query without points
finds pointed Hebrew, ``secretae`` finds ``ſecretæ``'s ``ſ`` and ``métaux`` finds ``METAVX``'s neighbours; offsets
are kept in the raw text, so a snippet is a verbatim slice of the page and its highlights point into it.
"""

from __future__ import annotations

import re
from typing import Any

from imagesvc.catalog.text_fold import Word, fold_char, is_cjk

__all__ = ["SNIPPET_CHARS", "locate", "snippet"]

SNIPPET_CHARS = 240  # about three lines of a printed page


def _folded(text: str) -> tuple[str, list[int]]:
    """``text`` folded character by character, and for each folded character the raw offset it came from."""
    if text.isascii():
        return text.lower(), list(range(len(text)))
    out: list[str] = []
    where: list[int] = []
    for i, char in enumerate(text):
        piece = fold_char(char)
        out.append(piece)
        where.extend([i] * len(piece))
    return "".join(out), where


def _pattern(words: list[Word]) -> re.Pattern[str]:
    """One regex for every word: a phrase's tokens apart by any non-token run (none between CJK characters), whole
    tokens only outside CJK."""
    alternatives = []
    for word in words:
        first, *rest = word.tokens
        body = "" if is_cjk(first) else r"(?<![^\W_])"
        body += re.escape(first)
        for before, token in zip(word.tokens, rest, strict=False):
            gap = (r"[\W_]+", r"[\W_]*", "")[is_cjk(before) + is_cjk(token)]  # between CJK characters, none
            body += gap + re.escape(token)
        body += "" if is_cjk(word.tokens[-1]) else r"(?![^\W_])"
        alternatives.append(body)
    return re.compile("|".join(alternatives))


def locate(text: str, words: list[Word]) -> list[tuple[int, int]]:
    """``[(start, end)]`` raw-text spans where any of ``words`` occurs, in order."""
    if not words or not text:
        return []
    folded, where = _folded(text)
    spans = []
    for match in _pattern(words).finditer(folded):
        if match.end() > match.start():
            spans.append((where[match.start()], where[match.end() - 1] + 1))
    return spans


def snippet(text: str, words: list[Word], width: int = SNIPPET_CHARS) -> dict[str, Any] | None:
    """A window of about ``width`` characters of ``text`` around its first match, cut at spaces where there are any,
    with ``highlights``: ``[start, end]`` offsets of every match inside the window. None when nothing matches."""
    spans = locate(text, words)
    if not spans:
        return None
    first = spans[0][0]
    start = max(0, first - width // 3)
    end = min(len(text), start + width)
    if start > 0 and (space := text.find(" ", start, first)) != -1:
        start = space + 1
    if end < len(text) and (space := text.rfind(" ", spans[0][1], end)) != -1:
        end = space
    window = text[start:end]
    inside = [[a - start, min(b, end) - start] for a, b in spans if a >= start and a < end]
    return {
        "text": ("…" if start > 0 else "") + window + ("…" if end < len(text) else ""),
        "highlights": [[a + (start > 0), b + (start > 0)] for a, b in inside],
    }
