"""English glosses of a Latin, Hebrew, Italian or Arabic query, from bilingual dictionaries (``dictionaries``) read
through simplemma's lemmas (``lemmas``).

The descriptions are English and e5 reads Latin and Hebrew less well than the other languages of the library, and
confuses close Italian and Arabic words (a foundry for a furnace), so a query in any of the four is also given in the
words of a dictionary: each of its words is looked up as typed, then as its lemma, and replaced by the sense of the
headword found; the query's vector is then blended with the vector of that gloss (``dense``). Nothing is written for
any query: the glosses are whatever the dictionaries say.

- A word: as typed first (the dictionary's own headword: "rosa" a rose, "מדפיס" a printer, "città"), then as
  simplemma's lemma of it ("caudam": "cauda", "הבולע": "בלע", "والقمر": "قمر", "cunicoli": "cunicolo"). Hebrew reads
  the modern dictionary by both before Strong's; Arabic tries each with the article first, since FreeDict writes nouns
  with it and a bare headword is often a verb's past tense ("الجذر": root, "جذر": radicalize).
- Which language: Hebrew letters make a query Hebrew, Arabic letters Arabic; a query in Latin letters (NFC first) is
  offered to Latin and to Italian, and each accepts it by one rule (``_accepted``): two thirds of its words are known
  to the language (a lemma in simplemma's lists or a headword of the dictionary) or are its function words, none is a
  function word of another of the library's languages that the language does not know, such a word counts against it
  even where it knows one, a single letter is no word, and its own words outnumber the English ones (stopwords-iso,
  ``stopwordsiso``, MIT). Where both accept it, the one that knows more of its words wins; on a tie Italian, if the
  query has an Italian function word that is none of Latin's and no noun ("di", "con", "della").

Each dictionary is read on the first query in its language (or by ``Glossary.load`` at start-up), in the worker
thread that encodes the query, and kept for the life of the process in packed tables (``packed``), beside
simplemma's front-coded lists (``benchmarks/gloss_memory.py`` measures both). A package that is not installed means
no glosses for that language (``available``), never an error.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import unicodedata
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from imagesvc.search import dictionaries
from imagesvc.search.dictionaries import available, stopwords
from imagesvc.search.lemmas import lemmas, plain
from imagesvc.search.packed import Keys, key_set, release_freed_memory, text_tables

__all__ = ["LANGUAGES", "MOST_WORDS", "Gloss", "Glossary", "available", "english", "glossary", "language_of"]

log = logging.getLogger("imagesvc.search.glosses")
_WORD = re.compile(r"[^\W\d_]+")
_HEBREW_LETTER = re.compile(r"[\u05d0-\u05ea]")
_ARABIC_LETTER = re.compile(r"[\u0620-\u063f\u0641-\u064a\u0671-\u06d3]")  # tatweel (U+0640) is no letter
# letters of Persian and Urdu that Arabic does not write: such a query is not read through an Arabic dictionary
_NOT_ARABIC = frozenset("پچژگیکےٹڈڑںھۀ")
_OTHER_LANGUAGES = ("en", "de", "fr", "it", "es")
_ARTICLE = "ال"
_ARABIC_ENDINGS = ("ها", "ه")  # "its" (her), and "his" or the feminine ة (folded to ه)

LANGUAGES = ("la", "he", "it", "ar")  # the query languages a dictionary glosses
MOST_WORDS = 32  # of a query's words, the first this many are read (hostile input: thousands of words)


@dataclass(frozen=True)
class Gloss:
    """A query's language, its English gloss, which of its words the dictionary gave, and every word it knows."""

    language: str
    text: str
    words: tuple[tuple[str, str], ...]
    known: frozenset[str] = frozenset()  # the query's words the dictionary knows (casefolded): spelt right


def _accepted(words: list[str], known: set[str], function: set[str], foreign: Collection[str]) -> frozenset[str] | None:
    """Whether a query of ``words`` (casefolded) is in a language, ``known`` being those it knows and ``function``
    those that are its function words: ``None`` if a function word of another language (``foreign``) is none it knows
    ("che", "le", "d'", "y"), or fewer than two thirds of the words are its own, or they are no more than the English
    ones; else the words it knows. Another language's function word counts against it even where the language knows
    it (simplemma's Latin lists "une" and "und", the Italian wordnet has "et" as E.T.)."""
    from imagesvc.search.spelling import english_word

    if any(w in foreign and w not in known for w in words):
        return None
    own = [w for w in words if (w in known and w not in foreign) or w in function]
    english = [w for w in words if english_word(w) and w not in function]
    if len(own) * 3 < len(words) * 2 or len(own) <= len(english):
        return None
    return frozenset(w for w in words if w in known or w in function)


class _Reader:
    """One language's reading of a query: simplemma's lemmas, the dictionary's senses (``tables``, read in order),
    how a word is keyed in them, and the language's function words."""

    def __init__(
        self,
        code: str,
        read: Callable[[], list[Mapping[str, str]]],
        key: Callable[[str], str],
        others: tuple[str, ...] = (),
    ) -> None:
        # first what is kept for good, then the dictionary: what is kept is not made among the reading's temporaries,
        # where it would pin their memory (the process grew by twice as much the other way round)
        self.lemmas = lemmas(code)
        own, *other = stopwords(code, *others)
        self.code, self.key, self.latin_letters = code, key, bool(others)
        self.stopwords = key_set({key(plain(w)) for w in own})
        self.foreign = key_set(set().union(*other) - own)
        self.tables = text_tables(*read())

    def forms(self, word: str) -> list[str]:
        """The keys ``word`` is looked up by, in order: as typed, then its lemma."""
        found = self.lemmas.lemma(word)
        return list(dict.fromkeys([self.key(plain(word)), *([self.key(found)] if found is not None else [])]))

    def sense(self, word: str) -> str | None:
        """The sense of the first of ``word``'s forms a table has, the tables read in order."""
        forms = self.forms(word)
        for table in self.tables:
            hit = next((table[f] for f in forms if f in table), None)
            if hit:
                return hit
        return None

    def knows(self, word: str) -> bool:
        """Whether ``word`` (two letters or more) is a form simplemma's lists have, or a headword of the dictionary."""
        return len(word) > 1 and (self.lemmas.lemma(word) is not None or self.sense(word) is not None)

    def function_word(self, word: str) -> bool:
        return self.key(plain(word)) in self.stopwords

    def gloss(self, words: list[str]) -> tuple[list[tuple[str, str]], frozenset[str]] | None:
        """Each content word as typed with its sense, and the words the language knows; ``None`` where the query is
        not in this language (Latin letters only: ``_accepted``)."""
        known: frozenset[str] | None = None
        if self.latin_letters:  # Latin or Italian, or neither
            lower = [w.casefold() for w in words]
            function = {w for w in lower if self.function_word(w)}
            known = _accepted(lower, {w for w in lower if self.knows(w)}, function, self.foreign)
            if known is None:
                return None
        out = [(w, sense) for w in words if self.content(w) and (sense := self.sense(w))]
        return out, known if known is not None else frozenset(w.casefold() for w, _sense in out)

    def content(self, word: str) -> bool:
        """Whether ``word`` may say what a query is about: not a function word."""
        return not self.function_word(word)


class _Latin(_Reader):
    """Latin: WORDS keeps a comparative under its positive, where simplemma's lemma of it is the comparative."""

    def __init__(self) -> None:
        super().__init__("la", lambda: [dictionaries.latin()], dictionaries.latin_key, others=_OTHER_LANGUAGES)

    def forms(self, word: str) -> list[str]:
        forms = super().forms(word)
        return forms + [f[: -len("ior")] + "us" for f in forms if f.endswith("ior") and len(f) > 5]


class _Italian(_Reader):
    """Italian: the wordnet's nouns that stopwords-iso lists as function words are content ("città", "anno"), and
    its function words that are none of Latin's and no noun say "Italian, not Latin" on a tie (``signals``)."""

    def __init__(self) -> None:
        nouns: set[str] = set()

        def read() -> list[Mapping[str, str]]:
            senses, found = dictionaries.italian()
            nouns.update(found)
            return [senses]

        super().__init__("it", read, str.casefold, others=("la", "en", "de", "fr", "es"))
        self.nouns = key_set(nouns)
        self.signals = key_set(set(self.stopwords) - stopwords("la")[0] - nouns)

    def content(self, word: str) -> bool:
        if not self.function_word(word):
            return True
        return len(word) > 3 and any(form in self.nouns for form in self.forms(word))


class _Hebrew(_Reader):
    """Hebrew: the dictionaries' headwords are pointed, and pointed Hebrew writes fewer vowel letters (ו, י) than a
    query in plain letters does ("מאזניים" for "מֹאזְנַיִם"), so a form of four letters or more is also looked up
    without them: in the modern dictionary's headwords kept so (no verb's: its headword is its past tense, which a
    participle's letters would find), and in Strong's as they are."""

    def __init__(self) -> None:
        super().__init__("he", _hebrew_tables, str)

    def sense(self, word: str) -> str | None:
        forms = self.forms(word)
        bare = [_bare(f) for f in forms if len(f) > 3]
        modern, modern_bare, biblical = self.tables
        for table, keys in ((modern, forms), (modern_bare, bare), (biblical, [*forms, *bare])):
            hit = next((table[k] for k in keys if k in table), None)
            if hit:
                return hit
        return None


def _hebrew_tables() -> list[Mapping[str, str]]:
    """The modern dictionary, its headwords without vowel letters (no verb's), and Strong's."""
    modern, biblical = dictionaries.hebrew()
    bare: dict[str, str] = {}
    for word, sense in modern.items():
        if not sense.startswith("to "):
            bare.setdefault(_bare(word), sense)
    return [modern, bare, biblical]


def _bare(word: str) -> str:
    """A Hebrew word without its vowel letters (ו, י)."""
    return word.replace("ו", "").replace("י", "")


class _Arabic(_Reader):
    """Arabic: FreeDict writes nouns with the article and a verb's past tense bare ("الجذر": root, "جذر": radicalize),
    so each form is looked up with the article first; a word simplemma has no lemma of is also looked up without
    the article and a feminine or a possessive ending ("العطرية": "عطري", "ذيلها": "ذيل"). FreeDict has headwords
    in Latin letters ("mandrake"), which an Arabic query's other words are not."""

    def __init__(self) -> None:
        super().__init__("ar", lambda: [dictionaries.arabic()], dictionaries.arabic_key)

    def forms(self, word: str) -> list[str]:
        forms = super().forms(word)
        if len(forms) == 1:  # no lemma
            bare = forms[0].removeprefix(_ARTICLE)
            forms += [bare, *(bare.removesuffix(ending) for ending in _ARABIC_ENDINGS)]
        forms = [f for f in dict.fromkeys(forms) if len(f) >= 2]
        return [k for f in forms for k in ((f,) if f.startswith(_ARTICLE) else (_ARTICLE + f, f))]

    def content(self, word: str) -> bool:
        return _ARABIC_LETTER.search(word) is not None and not self.function_word(word)


_READERS: dict[str, Callable[[], _Reader]] = {"la": _Latin, "he": _Hebrew, "it": _Italian, "ar": _Arabic}


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
    words = set().union(*stopwords("de", "fr", "it", "es", "la"), _DUTCH_PORTUGUESE)
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
    """Glosses of queries; each language read once, on the first query in it (thread-safe)."""

    def __init__(self, languages: tuple[str, ...] = LANGUAGES) -> None:
        self.languages = tuple(code for code in languages if available().get(code))
        self._lock = threading.Lock()
        self._readers: dict[str, _Reader] = {}

    def _reader(self, code: str) -> _Reader | None:
        """The reader of ``code``, read on first use; ``None`` (logged once, that language no longer glossed) where
        its dictionary or simplemma's lists cannot be read: a dictionary never costs a search."""
        with self._lock:
            if code not in self._readers:
                try:
                    self._readers[code] = _READERS[code]()
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
            return self._readers[code]

    def load(self, languages: Collection[str] = LANGUAGES) -> None:
        """Read every available dictionary of ``languages`` now (at start-up, beside the text model)."""
        for code in self.languages:
            if code in languages:
                self._reader(code)

    def gloss(self, query: str, languages: Collection[str] = LANGUAGES) -> Gloss | None:
        """The English gloss of a query in one of ``languages`` (Latin, Hebrew, Italian or Arabic), or ``None``
        (another language, or no word found); the dictionaries of other languages are not read."""
        # NFKC: "virtù" typed as u and a combining grave is "virtù", Arabic presentation forms are the letters they
        # show; invisible format characters (joiners, direction marks, a soft hyphen) out, or they cut words in two;
        # then Hebrew and Arabic marks out (``plain``), or they would too
        query = plain("".join(c for c in unicodedata.normalize("NFKC", query) if unicodedata.category(c) != "Cf"))
        code = language_of(query)
        words = _WORD.findall(query)[:MOST_WORDS]
        if code is None or not words:
            return None
        results: dict[str, tuple[list[tuple[str, str]], frozenset[str]]] = {}
        for each in (code,) if code in ("he", "ar") else ("la", "it"):  # Latin letters: Latin or Italian
            reader = self._reader(each) if each in self.languages and each in languages else None
            result = reader.gloss(words) if reader is not None else None
            if result:
                results[each] = result
        if "la" in results and "it" in results:  # both accept it: whichever knows more of the words
            italian = self._readers["it"]
            signal = any(w.casefold() in italian.signals for w in words)  # type: ignore[attr-defined]
            del results["it" if (len(results["it"][1]), signal) <= (len(results["la"][1]), False) else "la"]
        if not results:
            return None
        code, (found, known) = next(iter(results.items()))
        if not found:
            return None
        return Gloss(code, " ".join(sense for _word, sense in found), tuple(found), known)


_shared: Glossary | None = None


def glossary() -> Glossary:
    """The process's one glossary (its dictionaries are read-only once loaded)."""
    global _shared
    if _shared is None:
        _shared = Glossary()
    return _shared
