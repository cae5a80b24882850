"""How page text and search queries are folded so that they meet, in every script the library holds.

One rule on both sides: compatibility forms are unfolded (the long s of early prints reads ``s``, ligatures split),
combining marks are dropped (Latin accents, Hebrew points and cantillation, Arabic harakat) and so is the Arabic
tatweel; case is left to the index. Scripts written without spaces (Chinese, Japanese kana, Korean syllables) are
spelled one character a token, so any run of them is found as a phrase of characters: a substring search.

Dialect-free: the SQLite full-text index (``page_text``) and any other backend fold with these same functions.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from dataclasses import dataclass
from functools import cache

__all__ = ["MAX_WORDS", "Word", "fold", "fold_char", "is_cjk", "query_words"]

MAX_WORDS = 32  # words a query may hold; more is refused, not silently cut

_TATWEEL = "\u0640"
# Han (with extensions and compatibility forms), kana, and Hangul syllables and jamo: written without spaces.
_CJK_RANGES = (
    (0x1100, 0x11FF),
    (0x3040, 0x30FF),
    (0x3130, 0x318F),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xAC00, 0xD7AF),
    (0xF900, 0xFAFF),
    (0x20000, 0x3134F),
)
_CJK_CLASS = "".join(f"{chr(a)}-{chr(b)}" for a, b in _CJK_RANGES)
_CJK = re.compile(f"([{_CJK_CLASS}])")
_TOKEN = re.compile(r"[^\W_]+")  # letters and digits: what the index's unicode61 tokenizer keeps as a token


@cache
def _marks() -> dict[int, None]:
    """Every combining mark (category Mn) and the tatweel, as a ``str.translate`` table that deletes them (built once,
    on first use; a translate table is ~10x faster than a regex class of the ~2,000 mark ranges)."""
    codes = range(sys.maxunicode + 1)
    table: dict[int, None] = {code: None for code in codes if unicodedata.category(chr(code)) == "Mn"}
    table[ord(_TATWEEL)] = None
    return table


def is_cjk(token: str) -> bool:
    """Whether ``token`` is one character of a script written without spaces."""
    return len(token) == 1 and any(a <= ord(token) <= b for a, b in _CJK_RANGES)


def fold(text: str) -> str:
    """``text`` as the index stores it and a query is matched: unfolded, unmarked, CJK spelled a character a token."""
    if text.isascii():
        return text.casefold()
    bare = unicodedata.normalize("NFC", unicodedata.normalize("NFKD", text).translate(_marks()))
    return _CJK.sub(r" \1 ", bare).casefold()


@cache
def fold_char(char: str) -> str:
    """One character folded for locating matches in raw text: unfolded, unmarked and lower-cased (maybe empty)."""
    return unicodedata.normalize("NFKD", char).translate(_marks()).casefold()


@dataclass(frozen=True)
class Word:
    """One word of a query as the tokens the index holds; several tokens are matched as a phrase, in order."""

    tokens: tuple[str, ...]


def query_words(query: str) -> list[Word]:
    """The words of a search query. Double-quoted parts are one phrase; elsewhere each run between spaces is a word
    (its tokens, e.g. ``golden-age`` or a run of Chinese characters, matched as a phrase). Everything else, search
    syntax included (``*``, ``NEAR(``, ``:``, ``^``, unbalanced quotes), is plain text: it can never reach the index as
    an operator. Empty when the query has no letter or digit."""
    words: list[Word] = []
    for number, part in enumerate(query.split('"')):
        chunks = [part] if number % 2 else part.split()
        for chunk in chunks:
            tokens = tuple(_TOKEN.findall(fold(chunk)))
            if tokens:
                words.append(Word(tokens))
    return words
