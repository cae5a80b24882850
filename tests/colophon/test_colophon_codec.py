"""The sealed colophon: what readers, forgers, normalizers and serializers do to it."""

from __future__ import annotations

import html
import json
import subprocess
import sys
import unicodedata
from collections.abc import Callable
from pathlib import Path

import icu
import pytest

import colophon
from colophon import Decoded, Note, decode, detect, encode, strip

SECRET = b"test-secret-0123456789"
NOTE = Note(
    title="Hortus sanitatis",
    year=1491,
    doi="10.5281/zenodo.1234567",
    url="https://rarebooks.example/b/3817",
    key_ref="k_3f9a2c",
    date="2025-11-22",
)
TEXT = "Of the rose: it cooleth and comforteth the heart."
ENGLAND = "\U0001f3f4\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f"
BIDI_CONTROLS = {"\u061c", "\u200e", "\u200f", *map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A))}
_NFKC_CF = icu.Normalizer2.getInstance(None, "nfkc_cf", icu.UNormalizationMode2.COMPOSE)

NORMALIZERS: dict[str, Callable[[str], str]] = {
    "NFC": lambda s: unicodedata.normalize("NFC", s),
    "NFD": lambda s: unicodedata.normalize("NFD", s),
    "NFKC": lambda s: unicodedata.normalize("NFKC", s),
    "NFKD": lambda s: unicodedata.normalize("NFKD", s),
    "NFKC_Casefold": _NFKC_CF.normalize,
}


def test_public_api_is_pinned() -> None:
    assert colophon.__all__ == ["Decoded", "Note", "decode", "detect", "encode", "strip"]


def test_package_needs_only_the_standard_library() -> None:
    probe = (
        "import sys, colophon; "
        "ours = {'colophon', '__main__'}; "
        "print(sorted({m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names) - ours))"
    )
    # -S: no site-packages, so nothing but the standard library and the repository root can be imported.
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-S", "-c", probe], cwd=repo, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_reader_with_the_secret_gets_the_note_back() -> None:
    sealed = encode(TEXT, NOTE, SECRET)
    assert sealed.startswith(TEXT)
    assert decode(sealed, SECRET) == Decoded(note=NOTE, authentic=True, bound=True)
    assert detect(sealed) == "sealed"
    assert strip(sealed) == TEXT


def test_decoded_as_dict_carries_the_readable_note() -> None:
    found = decode(encode(TEXT, NOTE, SECRET), SECRET)
    assert found is not None
    assert found.as_dict() == {
        "note": NOTE.as_dict(),
        "text": "cite:Hortus sanitatis|1491|doi:10.5281/zenodo.1234567|rarebooks.example/b/3817|by:k_3f9a2c|2025-11-22",
        "authentic": True,
        "bound": True,
    }


def test_added_characters_are_the_seal_then_invisible_tags() -> None:
    added = encode(TEXT, NOTE, SECRET)[len(TEXT) :]
    assert added[0] == "\u2000" and unicodedata.category(added[0]) == "Zs"
    assert added[1] == "\U000e0001" and added[-1] == "\U000e007f"
    assert all(icu.Char.hasBinaryProperty(ch, icu.UProperty.DEFAULT_IGNORABLE_CODE_POINT) for ch in added[1:])
    payload = "".join(chr(ord(ch) - 0xE0000) for ch in added[2:-1])
    assert payload.startswith(NOTE.to_text() + "|")
    assert len(payload) == len(NOTE.to_text()) + 22
    assert not BIDI_CONTROLS & set(added)


@pytest.mark.parametrize("form", NORMALIZERS)
def test_every_normalization_form_leaves_nothing_decodable(form: str) -> None:
    normalized = NORMALIZERS[form](encode(TEXT, NOTE, SECRET))
    assert decode(normalized, SECRET) is None
    # The first four keep the tag run (they never delete ignorables) but not the seal; NFKC_Casefold deletes the tags.
    assert detect(normalized) == ("none" if form == "NFKC_Casefold" else "void")
    assert strip(normalized) == normalized


@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_json_round_trip_keeps_the_colophon(ensure_ascii: bool) -> None:
    sealed = encode(TEXT, NOTE, SECRET)
    wire = json.dumps({"quote": sealed}, ensure_ascii=ensure_ascii)
    if ensure_ascii:
        assert wire.isascii() and "\\udb40\\udc01" in wire
    back = json.loads(wire)["quote"]
    assert back == sealed
    assert decode(back, SECRET) == Decoded(note=NOTE, authentic=True, bound=True)


def test_html_escape_round_trip_keeps_the_colophon() -> None:
    sealed = encode('He said "<b>rose & lily</b>"', NOTE, SECRET)
    escaped = html.escape(sealed)
    assert "&lt;b&gt;" in escaped and detect(escaped) == "sealed"
    assert decode(html.unescape(escaped), SECRET) == Decoded(note=NOTE, authentic=True, bound=True)


def test_re_encoding_replaces_the_old_colophon() -> None:
    other = Note(title="Herbarius", url="https://rarebooks.example/b/9", key_ref="k_other", date="2026-01-02")
    once = encode(TEXT, NOTE, SECRET)
    assert encode(once, NOTE, SECRET) == once
    twice = encode(once, other, SECRET)
    assert twice == encode(TEXT, other, SECRET)
    assert strip(twice) == TEXT
    found = decode(twice, SECRET)
    assert found is not None and found.note == other


def test_a_wrong_secret_or_an_edited_note_reads_not_authentic() -> None:
    sealed = encode(TEXT, NOTE, SECRET)
    other_secret = decode(sealed, b"another-secret")
    assert other_secret == Decoded(note=NOTE, authentic=False, bound=True)
    # Re-point the note at another requester by editing its tag characters, keeping the old MAC.
    edited = sealed.replace(
        "".join(chr(0xE0000 + ord(c)) for c in "by:k_3f9a2c"), "".join(chr(0xE0000 + ord(c)) for c in "by:k_000000")
    )
    found = decode(edited, SECRET)
    assert found is not None and found.note.key_ref == "k_000000"
    assert found.authentic is False


def test_a_colophon_moved_onto_other_text_reads_unbound() -> None:
    sealed = encode(TEXT, NOTE, SECRET)
    moved = "Some other text entirely." + sealed[len(TEXT) :]
    assert decode(moved, SECRET) == Decoded(note=NOTE, authentic=True, bound=False)
    assert decode(TEXT + " " + sealed[len(TEXT) :], SECRET) == Decoded(note=NOTE, authentic=True, bound=False)


def test_a_colophon_is_recognised_only_at_the_very_end() -> None:
    sealed = encode(TEXT, NOTE, SECRET)
    assert decode(sealed + "\n", SECRET) is None
    assert detect(sealed + "\n") == "none"
    assert strip(sealed + "\n") == sealed + "\n"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\u2000",
        "ends with an en quad\u2000",
        "flag " + ENGLAND,
        ENGLAND + "\u2000",
        "\u2000\U000e0001\U000e0041\U000e007f",  # our framing around a payload we never write
        "مرحبا بالعالم",
        "שלום עולם",
        "e\u0301\u0327",
        "\U0001f1ec\U0001f1e7",
    ],
)
def test_awkward_texts_come_back_exactly(text: str) -> None:
    assert detect(text) == "none"
    assert strip(text) == text
    sealed = encode(text, NOTE, SECRET)
    assert sealed.startswith(text)
    assert strip(sealed) == text
    assert decode(sealed, SECRET) == Decoded(note=NOTE, authentic=True, bound=True)


def test_void_colophon_from_a_seal_turned_into_a_plain_space() -> None:
    sealed = encode(TEXT, NOTE, SECRET)
    voided = sealed.replace("\u2000", " ")
    assert detect(voided) == "void"
    assert decode(voided, SECRET) is None


@pytest.mark.parametrize("secret", [b"", "text-secret"])
def test_a_secret_must_be_non_empty_bytes(secret: object) -> None:
    with pytest.raises(ValueError, match="secret"):
        encode(TEXT, NOTE, secret)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="secret"):
        decode(TEXT, secret)  # type: ignore[arg-type]
