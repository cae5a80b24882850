"""Property tests: the colophon's guarantees over arbitrary and deliberately ambiguous Unicode text."""

from __future__ import annotations

import unicodedata

import icu
from hypothesis import given, settings
from hypothesis import strategies as st

from colophon import Decoded, Note, decode, detect, encode, strip

SECRET = b"property-secret"
ENGLAND = "\U0001f3f4\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f"
BIDI_CONTROLS = {"\u061c", "\u200e", "\u200f", *map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A))}
_NFKC_CF = icu.Normalizer2.getInstance(None, "nfkc_cf", icu.UNormalizationMode2.COMPOSE)
FAST = settings(max_examples=200, deadline=None)

notes = st.builds(
    Note,
    title=st.text(max_size=40),
    year=st.none() | st.integers(-9999, 9999),
    doi=st.none() | st.text(min_size=1, max_size=5),
    url=st.builds(str.__add__, st.sampled_from(["https://", "http://"]), st.text(min_size=1, max_size=7)).filter(
        lambda u: u[u.index("//") + 2] != "/"
    ),
    key_ref=st.from_regex(r"[A-Za-z0-9_.-]{1,32}", fullmatch=True),
    date=st.dates(),
)
# Whole, truncated and seal-less colophons, to be mixed into user text as if someone had pasted them there.
suffixes = st.builds(lambda note, key: encode("", note, key), notes, st.binary(min_size=1, max_size=8))
broken = st.builds(lambda s, cut: s[: cut % len(s)] + s[cut % len(s) + 1 :], suffixes, st.integers(0, 500))
AWKWARD = [
    "\u2000",
    "\u2002",
    " ",
    "\U000e0001",
    "\U000e007f",
    "\U000e0041",
    "\U000e0020",
    ENGLAND,
    "\U0001f3f4",
    "\U0001f1ec\U0001f1e7",
    "مرحبا بالعالم",
    "שלום",
    "\u0301",
    "e\u0301",
    "|",
    "%",
    "\ufeff",
]
pieces = st.one_of(
    st.text(max_size=12),
    st.sampled_from(AWKWARD),
    st.text(st.characters(min_codepoint=0xE0000, max_codepoint=0xE007F), max_size=8),
    suffixes,
    suffixes.map(lambda s: s[1:]),
    broken,
)
texts = st.one_of(st.text(), st.lists(pieces, max_size=6).map("".join))


@FAST
@given(texts, notes)
def test_encode_then_decode_and_strip_give_back_note_and_text(text: str, note: Note) -> None:
    sealed = encode(text, note, SECRET)
    assert decode(sealed, SECRET) == Decoded(note=note, authentic=True, bound=True)
    assert strip(sealed) == strip(text)
    assert sealed.startswith(strip(text))
    assert encode(sealed, note, SECRET) == sealed
    if detect(text) != "sealed":
        # Only our exact structure at the very end is ever removed: any other text comes back unchanged.
        assert strip(text) == text
    assert detect(strip(text)) != "sealed"


@FAST
@given(texts, notes)
def test_added_characters_are_invisible_tags_after_one_space_seal(text: str, note: Note) -> None:
    sealed = encode(text, note, SECRET)
    added = sealed[len(strip(text)) :]
    assert added[0] == "\u2000"
    assert all(icu.Char.hasBinaryProperty(ch, icu.UProperty.DEFAULT_IGNORABLE_CODE_POINT) for ch in added[1:])
    assert not BIDI_CONTROLS & set(added)
    assert len(added) <= len(note.to_text()) + 25


@FAST
@given(texts, notes)
def test_no_normalization_form_leaves_a_decodable_colophon(text: str, note: Note) -> None:
    sealed = encode(text, note, SECRET)
    for form in ("NFC", "NFD", "NFKC", "NFKD"):
        normalized = unicodedata.normalize(form, sealed)
        assert decode(normalized, SECRET) is None
        assert detect(normalized) == "void"
    folded = _NFKC_CF.normalize(sealed)
    assert decode(folded, SECRET) is None
    assert detect(folded) == "none"


@FAST
@given(texts, texts, notes)
def test_a_moved_colophon_reads_unbound_and_a_foreign_key_not_authentic(text: str, other: str, note: Note) -> None:
    sealed = encode(text, note, SECRET)
    moved = other + sealed[len(strip(text)) :]
    found = decode(moved, SECRET)
    assert found is not None and found.authentic
    assert found.bound == (other == strip(text))
    assert decode(sealed, b"not-" + SECRET) == Decoded(note=note, authentic=False, bound=True)


@FAST
@given(notes)
def test_note_text_round_trips_as_short_printable_ascii(note: Note) -> None:
    text = note.to_text()
    assert Note.parse(text) == note
    assert all(0x20 <= ord(ch) <= 0x7E for ch in text)
    assert len(text.split("|")[0]) <= len("cite:") + 24
