"""The BagIt (RFC 8493) tag files of an archive: ``bagit.txt``, ``bag-info.txt`` and the SHA-256 manifests."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

__all__ = ["BAGIT_TXT", "bag_info", "manifest", "sha256_hex"]

BAGIT_TXT = b"BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest(entries: Iterable[tuple[str, str]]) -> bytes:
    """``manifest-sha256.txt`` (or the tag manifest) from ``(path inside the bag, hex digest)`` pairs."""
    return "".join(f"{digest}  {path}\n" for path, digest in entries).encode()


def bag_info(fields: Iterable[tuple[str, str]]) -> bytes:
    """``bag-info.txt`` from ``(label, value)`` pairs; a value's line breaks become spaces (one line per field)."""
    return "".join(f"{label}: {' '.join(str(value).split())}\n" for label, value in fields).encode()
