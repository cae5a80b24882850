"""Invisible provenance colophons for served text: a signed, text-bound note that any Unicode normalization voids.

Standalone: standard library only, and never imports imagesvc. The format is specified in docs/colophon.md.
"""

from __future__ import annotations

from colophon.codec import Decoded, decode, detect, encode, strip
from colophon.note import Note

__all__ = ["Decoded", "Note", "decode", "detect", "encode", "strip"]
