"""Seal a note onto the end of a text as invisible tag characters, and find, verify or remove it again."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
from typing import Any, Literal

from colophon.note import Note

__all__ = ["MAX_PAYLOAD", "Decoded", "decode", "detect", "encode", "strip"]

SEAL = "\u2000"  # EN QUAD: NFC/NFD map it to U+2002 and NFKC/NFKD to U+0020, so no normalized text keeps it.
BEGIN = "\U000e0001"  # LANGUAGE TAG
CANCEL = "\U000e007f"  # CANCEL TAG
TAG_BASE = 0xE0000
BIND_BYTES = 6
MAC_BYTES = 9
BIND_CHARS = 8  # base64url of BIND_BYTES, unpadded
MAC_CHARS = 12  # base64url of MAC_BYTES, unpadded
MAX_PAYLOAD = 512  # longer than any payload a valid Note can produce; bounds the backward scan
_B64URL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")

State = Literal["sealed", "void", "none"]


@dataclasses.dataclass(frozen=True)
class Decoded:
    """A colophon read back: `authentic` means our secret signed it, `bound` that it still sits on its own text."""

    note: Note
    authentic: bool
    bound: bool

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form: the note's fields, its readable text, and the two verdicts."""
        return {
            "note": self.note.as_dict(),
            "text": self.note.to_text(),
            "authentic": self.authentic,
            "bound": self.bound,
        }


@dataclasses.dataclass(frozen=True)
class _Tail:
    start: int  # index of the first character of the tag run (the LANGUAGE TAG)
    note: Note
    signed: str  # the payload bytes the MAC covers: note text, "|", binding digest
    bind: str
    mac: str


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _binding(visible: str) -> str:
    # surrogatepass: any Python str can be bound, even one carrying a lone surrogate.
    return _b64(hashlib.sha256(visible.encode("utf-8", "surrogatepass")).digest()[:BIND_BYTES])


def _mac(secret: bytes, signed: str) -> str:
    return _b64(hmac.new(secret, signed.encode("ascii"), hashlib.sha256).digest()[:MAC_BYTES])


def _check_secret(secret: bytes) -> None:
    if not isinstance(secret, bytes | bytearray) or not secret:
        raise ValueError("secret must be non-empty bytes")


def _parse_payload(payload: str) -> tuple[Note, str, str, str] | None:
    """Split `note|bind|mac`; None unless every part is in the exact form `encode` writes."""
    note_text, sep, rest = payload.rpartition("|")
    signed, mac = note_text, rest
    note_text, sep2, bind = note_text.rpartition("|")
    if not (sep and sep2) or len(bind) != BIND_CHARS or len(mac) != MAC_CHARS:
        return None
    # Unpadded base64url of 6 and 9 bytes uses every bit of the last character, so any alphabet string is canonical.
    if not _B64URL.issuperset(bind) or not _B64URL.issuperset(mac):
        return None
    try:
        note = Note.parse(note_text)
    except ValueError:
        return None
    return note, signed, bind, mac


def _tail(text: str) -> _Tail | None:
    """The well-formed tag run at the very end of `text`, whatever precedes it; None if there is none."""
    if not text.endswith(CANCEL):
        return None
    end = len(text) - 1
    start = end
    # Payload tags are E0020..E007E; BEGIN (E0001) and CANCEL (E007F) never occur inside, so this stop is unique.
    while start > 0 and end - start <= MAX_PAYLOAD and 0xE0020 <= ord(text[start - 1]) <= 0xE007E:
        start -= 1
    if start == 0 or text[start - 1] != BEGIN or end - start > MAX_PAYLOAD:
        return None
    payload = "".join(chr(ord(ch) - TAG_BASE) for ch in text[start:end])
    parsed = _parse_payload(payload)
    if parsed is None:
        return None
    note, signed, bind, mac = parsed
    return _Tail(start=start - 1, note=note, signed=signed, bind=bind, mac=mac)


def _sealed(text: str) -> _Tail | None:
    tail = _tail(text)
    if tail is None or tail.start == 0 or text[tail.start - 1] != SEAL:
        return None
    return tail


def strip(text: str) -> str:
    """Remove every sealed colophon from the end of `text` (the seal and its tag run); anything else is kept.

    Text that does not end with a sealed colophon (including emoji tag sequences, a trailing U+2000, or a
    colophon whose seal normalization destroyed) is returned unchanged. `strip(encode(t, ...)) == strip(t)`.
    """
    while (tail := _sealed(text)) is not None:
        text = text[: tail.start - 1]
    return text


def encode(text: str, note: Note, secret: bytes) -> str:
    """Return `text` (any colophon already at its end removed) followed by a sealed colophon for `note`.

    Adds U+2000, U+E0001, the payload as tag characters and U+E007F at the very end; never alters what comes before.
    Raises ValueError if `secret` is empty.
    """
    _check_secret(secret)
    visible = strip(text)
    signed = note.to_text() + "|" + _binding(visible)
    payload = signed + "|" + _mac(bytes(secret), signed)
    return visible + SEAL + BEGIN + "".join(chr(TAG_BASE + ord(ch)) for ch in payload) + CANCEL


def decode(text: str, secret: bytes) -> Decoded | None:
    """Read the sealed colophon at the very end of `text`; None if there is none (e.g. after any normalization).

    `authentic`: the note and binding digest carry a valid HMAC under `secret`. `bound`: the binding digest matches
    the text before the seal. Trust the note only when both are true. Raises ValueError if `secret` is empty.
    """
    _check_secret(secret)
    tail = _sealed(text)
    if tail is None:
        return None
    authentic = hmac.compare_digest(tail.mac, _mac(bytes(secret), tail.signed))
    bound = hmac.compare_digest(tail.bind, _binding(text[: tail.start - 1]))
    return Decoded(note=tail.note, authentic=authentic, bound=bound)


def detect(text: str) -> State:
    """'sealed' if `text` ends with an intact colophon, 'void' if it ends with a colophon payload whose seal is gone
    (what NFC, NFD, NFKC or NFKD leave behind), else 'none' (also after NFKC_Casefold, which deletes tag characters)."""
    tail = _tail(text)
    if tail is None:
        return "none"
    return "sealed" if tail.start > 0 and text[tail.start - 1] == SEAL else "void"
