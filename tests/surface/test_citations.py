"""Citation shapes of spec §2 for every kind of book record, and the colophon sealer served text goes through."""

from __future__ import annotations

import datetime as dt
import unicodedata
from typing import Any

import pytest

from colophon import decode, detect
from imagesvc.surface.citations import Sealer, bibliography, citation

URL = "https://library.example/book/demo?page=5"
SECRET = b"unit-test-secret"


def _book(**fields: Any) -> dict[str, Any]:
    book: dict[str, Any] = {
        "id": "b1",
        "slug": "demo",
        "title": "Speculum Fornacum",
        "author": "Johannes Kesslerus",
        "year": 1612,
        "doi": "10.5281/zenodo.1000001",
        "translator": "Anna Example",
    }
    book.update(fields)
    return book


def test_full_record_matches_every_spec_shape() -> None:
    assert citation(_book(), 5, URL) == {
        "inline": "(Johannes Kesslerus 1612, p. 5)",
        "footnote": "Johannes Kesslerus, Speculum Fornacum, trans. Anna Example (1612), p. 5. "
        "DOI: 10.5281/zenodo.1000001",
        "bibliography": "Johannes Kesslerus. Speculum Fornacum. Translated by Anna Example. 1612. "
        "DOI: 10.5281/zenodo.1000001",
        "citation_url": URL,
        "doi_url": "https://doi.org/10.5281/zenodo.1000001",
    }


def test_no_year_reads_nd() -> None:
    cite = citation(_book(year=None), 2, URL)
    assert cite["inline"] == "(Johannes Kesslerus n.d., p. 2)"
    assert cite["footnote"] == (
        "Johannes Kesslerus, Speculum Fornacum, trans. Anna Example (n.d.), p. 2. DOI: 10.5281/zenodo.1000001"
    )
    assert cite["bibliography"] == (
        "Johannes Kesslerus. Speculum Fornacum. Translated by Anna Example. n.d. DOI: 10.5281/zenodo.1000001"
    )


def test_no_doi_leaves_the_doi_part_out() -> None:
    cite = citation(_book(doi=None), 3, URL)
    assert cite["footnote"] == "Johannes Kesslerus, Speculum Fornacum, trans. Anna Example (1612), p. 3."
    assert cite["bibliography"] == "Johannes Kesslerus. Speculum Fornacum. Translated by Anna Example. 1612."
    assert cite["doi_url"] is None


def test_no_translator_leaves_the_translator_part_out() -> None:
    cite = citation(_book(translator=None), 4, URL)
    assert cite["footnote"] == "Johannes Kesslerus, Speculum Fornacum (1612), p. 4. DOI: 10.5281/zenodo.1000001"
    assert cite["bibliography"] == "Johannes Kesslerus. Speculum Fornacum. 1612. DOI: 10.5281/zenodo.1000001"


def test_bare_record_never_says_none() -> None:
    cite = citation(_book(year=None, doi=None, translator="  ", author="Hieronymus Grünwalder"), 1, URL)
    assert cite == {
        "inline": "(Hieronymus Grünwalder n.d., p. 1)",
        "footnote": "Hieronymus Grünwalder, Speculum Fornacum (n.d.), p. 1.",
        "bibliography": "Hieronymus Grünwalder. Speculum Fornacum. n.d.",
        "citation_url": URL,
        "doi_url": None,
    }
    assert not any("None" in str(v) for v in cite.values() if v is not None)


def test_bibliography_does_not_double_full_stops() -> None:
    entry = bibliography(_book(author="B. Example Jr.", title="Quid est alchymia?", translator="C. D."))
    assert entry == "B. Example Jr. Quid est alchymia? Translated by C. D. 1612. DOI: 10.5281/zenodo.1000001"


def test_missing_author_and_title_get_placeholders() -> None:
    cite = citation(_book(author=None, title=""), 1, URL)
    assert cite["inline"] == "(Anonymous 1612, p. 1)"
    assert cite["footnote"].startswith("Anonymous, Untitled, trans.")


def _sealer(key_ref: str | None, **book: Any) -> Sealer:
    return Sealer(_book(**book), key_ref, SECRET, dt.date(2025, 11, 22))


def test_sealer_without_key_returns_text_untouched() -> None:
    sealer = _sealer(None)
    assert not sealer.active
    assert sealer.seal("Sol et Luna", URL) == "Sol et Luna"
    assert sealer.seal(None, URL) is None


def test_sealer_names_edition_page_and_key() -> None:
    served = _sealer("a1b2c3d4").seal("Sol et Luna", URL)
    assert served is not None and served.startswith("Sol et Luna")
    found = decode(served, SECRET)
    assert found is not None and found.authentic and found.bound
    note = found.note
    assert (note.title, note.year, note.doi, note.url, note.key_ref) == (
        "Speculum Fornacum",
        1612,
        "10.5281/zenodo.1000001",
        URL,
        "a1b2c3d4",
    )
    assert note.date == dt.date(2025, 11, 22)


@pytest.mark.parametrize("form", ["NFC", "NFD", "NFKC", "NFKD"])
def test_sealed_text_is_void_after_normalization(form: str) -> None:
    served = _sealer("a1b2c3d4").seal("Quod est superius ſicut inferius", URL)
    assert served is not None
    assert decode(unicodedata.normalize(form, served), SECRET) is None


def test_overlong_page_url_falls_back_to_the_book_url() -> None:
    long_url = "https://library.example/book/" + "x" * 75 + "?page=5"  # 103 bytes; the book URL alone fits
    found = decode(_sealer("a1b2c3d4").seal("text", long_url) or "", SECRET)
    assert found is not None and found.note.url == long_url.split("?")[0]


def test_url_too_long_even_for_the_book_falls_back_to_the_site() -> None:
    found = decode(_sealer("a1b2c3d4").seal("text", "https://library.example/book/" + "x" * 120) or "", SECRET)
    assert found is not None and found.note.url == "https://library.example/"


def test_overlong_doi_is_left_out_of_the_note_not_the_text() -> None:
    found = decode(_sealer("a1b2c3d4", doi="10.1/" + "d" * 80).seal("text", URL) or "", SECRET)
    assert found is not None and found.note.doi is None and found.note.url == URL


def test_sealing_twice_keeps_one_colophon() -> None:
    sealer = _sealer("a1b2c3d4")
    once = sealer.seal("text", URL)
    assert sealer.seal(once, URL) == once
    assert detect(once or "") == "sealed"
