"""How page text and search queries are folded so that they meet, in every script the library holds.

One rule on both sides: compatibility forms are unfolded (the long s of early prints reads ``s``, ligatures split),
combining marks are dropped (Latin accents, Hebrew points and cantillation, Arabic harakat) and so is the Arabic
tatweel; case is left to the index. Scripts written without spaces (Chinese, Japanese kana, Korean syllables) are
spelled one character a token, so any run of them is found as a phrase of characters: a substring search.

Dialect-free: the SQLite full-text index (``page_text``) and PostgreSQL's term table (``page_text_sql``) fold with
these same functions.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from dataclasses import dataclass
from functools import cache

__all__ = ["MAX_WORDS", "Word", "fold", "fold_char", "index_terms", "index_text", "is_cjk", "query_words"]

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
_CJK_RUN = re.compile(f"[{_CJK_CLASS}]+")
_TOKEN = re.compile(r"[^\W_]+")  # letters and digits: what the index's unicode61 tokenizer keeps as a token


@cache
def _marks() -> dict[int, None]:
    """Every combining mark (category Mn) and the tatweel, as a ``str.translate`` table that deletes them (built once,
    on first use; a translate table is ~10x faster than a regex class of the ~2,000 mark ranges)."""
    codes = range(sys.maxunicode + 1)
    table: dict[int, None] = {code: None for code in codes if unicodedata.category(chr(code)) == "Mn"}
    table[ord(_TATWEEL)] = None
    return table


@cache
def _mark_chars() -> frozenset[str]:
    return frozenset(map(chr, _marks()))


def _unmark(decomposed: str) -> str:
    """``decomposed`` without its marks. Most texts hold none (Latin with long s and ligatures, Chinese): asking
    first is ~5x cheaper than the translate, which was a third of a page write's CPU at the library's size."""
    return decomposed if _mark_chars().isdisjoint(decomposed) else decomposed.translate(_marks())


def is_cjk(token: str) -> bool:
    """Whether ``token`` is one character of a script written without spaces."""
    return len(token) == 1 and any(a <= ord(token) <= b for a, b in _CJK_RANGES)


def _bare(text: str) -> str:
    """``text`` unfolded, unmarked and case-folded, CJK still written as it was (``fold`` without the spelling)."""
    if text.isascii():
        return text.casefold()
    return unicodedata.normalize("NFC", _unmark(unicodedata.normalize("NFKD", text))).casefold()


def fold(text: str) -> str:
    """``text`` as the index stores it and a query is matched: unfolded, unmarked, CJK spelled a character a token."""
    if text.isascii():
        return text.casefold()
    return _CJK.sub(r" \1 ", _bare(text))


def _grams(run: str) -> str:
    return " " + " ".join([*run, *(run[i : i + 2] for i in range(len(run) - 1))]) + " "


def index_text(text: str) -> str:
    """``text`` as the index holds it: folded, and each run of CJK characters spelled as its characters and its
    character pairs, so that a query of two or more characters is found by pairs that must all be there (adjacency,
    without a phrase query) and a one-character query by the character itself."""
    if text.isascii():
        return text.casefold()
    bare = unicodedata.normalize("NFC", _unmark(unicodedata.normalize("NFKD", text))).casefold()
    return _CJK_RUN.sub(lambda m: _grams(m.group()), bare)


def index_terms(text: str) -> list[str]:
    """The distinct terms of ``index_text(text)``, as a tokenizer that keeps runs of letters and digits reads them
    (what an index without a tokenizer of its own stores: PostgreSQL's ``page_texts``)."""
    return sorted(set(_TOKEN.findall(index_text(text))))


@cache
def fold_char(char: str) -> str:
    """One character folded for locating matches in raw text: unfolded, unmarked and lower-cased (maybe empty), and
    composed again as ``fold`` composes (a Hangul syllable's NFKD is its jamo, which no folded query holds)."""
    return unicodedata.normalize("NFC", _unmark(unicodedata.normalize("NFKD", char))).casefold()


@dataclass(frozen=True)
class Word:
    """One word of a query as its tokens (a run of CJK characters is one token a character)."""

    tokens: tuple[str, ...]
    # Positions i where tokens[i - 1] and tokens[i] stood apart in the query (a space or a mark between them): the
    # index holds no character pair across such a gap, so a run of CJK characters ends there.
    apart: frozenset[int] = frozenset()

    @property
    def terms(self) -> tuple[str, ...]:
        """The index terms that must all stand in one text for the word to be there: its tokens, a run of two or
        more adjacent CJK characters as its character pairs (``index_text``)."""
        out: list[str] = []
        run = ""
        for i, token in enumerate((*self.tokens, "")):
            if token and is_cjk(token) and not (run and i in self.apart):
                run += token
                continue
            if run:
                out += [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]
                run = ""
            if token and is_cjk(token):
                run = token
            elif token:
                out.append(token)
        return tuple(dict.fromkeys(out))

    @property
    def ordered(self) -> bool:
        """Whether the index's terms cannot tell the word is there: two or more tokens that must stand in order
        (a quoted phrase, ``golden-age``, CJK words apart); one run of CJK characters is told by its pairs."""
        return len(self.tokens) > 1 and (bool(self.apart) or not all(is_cjk(t) for t in self.tokens))

    def in_folded(self, folded: str) -> bool:
        """Whether ``folded`` (text passed through ``fold``) holds the word's tokens in order, as whole tokens."""
        gaps = [
            r"[\W_]*" if is_cjk(a) or is_cjk(b) else r"[\W_]+"
            for a, b in zip(self.tokens, self.tokens[1:], strict=False)
        ]
        body = re.escape(self.tokens[0]) + "".join(
            g + re.escape(t) for g, t in zip(gaps, self.tokens[1:], strict=False)
        )
        return re.search(rf"(?<![^\W_]){body}(?![^\W_])", folded) is not None


def query_words(query: str) -> list[Word]:
    """The words of a search query. Double-quoted parts are one phrase; elsewhere each run between spaces is a word
    (its tokens, e.g. ``golden-age`` or a run of Chinese characters, matched as a phrase). Everything else, search
    syntax included (``*``, ``NEAR(``, ``:``, ``^``, unbalanced quotes), is plain text: it can never reach the index as
    an operator. Empty when the query has no letter or digit."""
    words: list[Word] = []
    for number, part in enumerate(query.split('"')):
        chunks = [part] if number % 2 else part.split()
        for chunk in chunks:
            tokens: list[str] = []
            apart: set[int] = set()
            for run in _TOKEN.findall(_bare(chunk)):  # runs of letters and digits, CJK as written
                if tokens:
                    apart.add(len(tokens))
                tokens += _TOKEN.findall(_CJK.sub(r" \1 ", run))
            if tokens:
                words.append(Word(tuple(tokens), frozenset(apart)))
    return words
