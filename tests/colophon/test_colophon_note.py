"""The note's compact text form: fixed template, escaping, shortening, validation."""

from __future__ import annotations

import datetime

import pytest

from colophon import Note


def make(**overrides: object) -> Note:
    fields: dict[str, object] = {
        "title": "Hortus sanitatis",
        "year": 1491,
        "doi": None,
        "url": "https://books.example.org/b/hortus-1491",
        "key_ref": "k_3f9a2c",
        "date": "2025-11-22",
    }
    fields.update(overrides)
    return Note(**fields)  # type: ignore[arg-type]


def test_text_form_follows_the_documented_template() -> None:
    note = make(doi="10.5281/zenodo.1234567")
    assert note.to_text() == (
        "cite:Hortus sanitatis|1491|doi:10.5281/zenodo.1234567|books.example.org/b/hortus-1491|by:k_3f9a2c|2025-11-22"
    )
    assert Note.parse(note.to_text()) == note


def test_template_costs_23_bytes_beyond_the_fields_so_a_short_url_keeps_a_note_within_80() -> None:
    note = make(url="https://rarebooks.example/b/3817")
    text = note.to_text()
    assert text == "cite:Hortus sanitatis|1491||rarebooks.example/b/3817|by:k_3f9a2c|2025-11-22"
    fields = len(note.title) + len("rarebooks.example/b/3817") + len(note.key_ref) + len("1491")
    assert len(text.encode("ascii")) == 23 + fields
    assert 40 <= len(text) <= 80


def test_http_urls_keep_their_scheme_and_https_is_elided() -> None:
    assert "|http://old.example/b/1|" in make(url="http://old.example/b/1").to_text()
    note = make(url="https://x.example/b/1")
    assert "|x.example/b/1|" in note.to_text()
    assert Note.parse(note.to_text()).url == "https://x.example/b/1"
    # A URL that itself holds "://" keeps its scheme, or it would read back as a different URL.
    nested = make(url="https://x.example/go?to=http://y.example")
    assert "|https://x.example/go?to=http://y.example|" in nested.to_text()
    assert Note.parse(nested.to_text()) == nested


def test_injected_delimiters_in_a_title_cannot_forge_fields() -> None:
    note = make(title="X|1|by:k_evil%")
    text = note.to_text()
    assert text.startswith("cite:X%7C1%7Cby:k_evil%25|")
    assert text.count("|") == 5
    assert Note.parse(text).key_ref == "k_3f9a2c"


def test_control_and_non_ascii_characters_are_percent_escaped_into_printable_ascii() -> None:
    note = make(title="Ab\nçé\u202e")
    text = note.to_text()
    assert "Ab%0A%C3%A7%C3%A9" in text
    assert all(0x20 <= ord(ch) <= 0x7E for ch in text)
    assert Note.parse(text).title == note.title


def test_long_titles_are_cut_at_a_word_and_marked() -> None:
    note = make(title="Hortus sanitatis: de herbis et plantis, de animalibus et reptilibus")
    assert note.title == "Hortus sanitatis: de..."
    assert Note.parse(note.to_text()) == note


def test_shortening_counts_escaped_bytes_and_keeps_combining_marks_with_their_letter() -> None:
    hebrew = make(title="ספר הזוהר עם פירוש הסולם")
    assert hebrew.title == "ספר..."
    # 'e' + COMBINING ACUTE repeated: a cut may never leave a bare 'e' whose accent fell past the budget.
    accented = make(title="e\u0301" * 20)
    assert accented.title.endswith("e\u0301...")
    assert len(make(title="x" * 24).title) == 24


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("year", 12345),
        ("year", True),
        ("doi", ""),
        ("doi", "10.1/" + "x" * 80),
        ("url", "/b/relative"),
        ("url", "ftp://x.example/b"),
        ("url", "https://" + "x" * 120),
        ("key_ref", "sk_live secret"),
        ("key_ref", "k" * 33),
        ("date", "22/11/2025"),
        ("date", datetime.datetime(2025, 11, 22, 10, 0)),
    ],
)
def test_invalid_fields_are_refused(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        make(**{field: value})


@pytest.mark.parametrize(
    "text",
    [
        "cite:A|1491||x.example/b|by:k_1",  # a field missing
        "cite:A|1491||x.example/b|k_1|2025-11-22",  # requester label missing
        "cite:A|01491||x.example/b|by:k_1|2025-11-22",  # non-canonical year
        "cite:%41|1491||x.example/b|by:k_1|2025-11-22",  # escape of a printable character
        "cite:%c3%a7|1491||x.example/b|by:k_1|2025-11-22",  # lowercase hex
        "cite:A|1491||https://x.example/b|by:k_1|2025-11-22",  # https not elided
        "cite:A|1491|10.1/x|x.example/b|by:k_1|2025-11-22",  # DOI without its label
        "cite:A|1491||x.example/b|by:k_1|2025-02-30",  # no such day
    ],
)
def test_parse_accepts_only_the_canonical_spelling(text: str) -> None:
    with pytest.raises(ValueError):
        Note.parse(text)


def test_as_dict_is_json_ready() -> None:
    assert make().as_dict() == {
        "title": "Hortus sanitatis",
        "year": 1491,
        "doi": None,
        "url": "https://books.example.org/b/hortus-1491",
        "key_ref": "k_3f9a2c",
        "date": "2025-11-22",
    }
