"""docs/colophon.md's worked example is what the code produces, so a third party can test a decoder against it."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from colophon import Decoded, Note, decode, encode

DOC = Path(__file__).resolve().parents[2] / "docs" / "colophon.md"


def example_lines() -> dict[str, str]:
    section = DOC.read_text(encoding="utf-8").split("## 8. Worked example", 1)[1]
    block = section.split("```", 2)[1]
    return dict(re.findall(r"^(\w+):\s+(\S+(?: \S+)*?)(?:\s{2,}.*)?$", block, flags=re.MULTILINE))


def test_worked_example_matches_the_code() -> None:
    text = "Of the rose: it cooleth and comforteth the heart."
    note = Note(
        title="Hortus sanitatis",
        year=1491,
        doi="10.5281/zenodo.1234567",
        url="https://rarebooks.example/b/3817",
        key_ref="k_3f9a2c",
        date="2025-11-22",
    )
    sealed = encode(text, note, b"example-secret")
    payload = "".join(chr(ord(ch) - 0xE0000) for ch in sealed[len(text) + 2 : -1])
    lines = example_lines()
    assert lines["payload"] == payload
    assert lines["note"] == note.to_text()
    assert payload == f"{lines['note']}|{lines['bind']}|{lines['mac']}"
    assert hashlib.sha256(text.encode()).hexdigest().startswith("c753aa7bd444")
    doc = " ".join(DOC.read_text(encoding="utf-8").split())
    assert f"The payload is {len(payload)} bytes, so {len(sealed) - len(text)} characters follow" in doc
    assert decode(sealed, b"example-secret") == Decoded(note=note, authentic=True, bound=True)


def test_documented_maximum_payload_is_the_real_maximum() -> None:
    longest = Note(
        title="x" * 30,
        year=-9999,
        doi="d" * 64,
        url="http://" + "u" * 93,
        key_ref="k" * 32,
        date="2025-11-22",
    )
    sealed = encode("", longest, b"k")
    assert len(sealed) - 3 == 274
    assert "The longest payload a valid note can produce is 274 bytes" in " ".join(DOC.read_text("utf-8").split())
