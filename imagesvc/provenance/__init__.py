"""Content Credentials (C2PA): signing keys, the manifests this service writes, and signing and reading them.

Marked public tiers are signed once at ingest (``sign.sign_public``); deliveries to keys are signed per request after
their XMP note is spliced (``sign.sign_delivery``): anything written into a file after signing breaks its hard
binding. Everything here is synchronous CPU work: callers run it in an executor or a process pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["Delivery", "PageSource", "SigningPaths"]


@dataclass(frozen=True)
class SigningPaths:
    """Where the PEM certificate chain (leaf first) and the PEM private key are; ``anchor`` is the local root
    certificate when the embedded default CA made the chain (None for an operator's chain)."""

    chain: Path
    key: Path
    anchor: Path | None = None


@dataclass(frozen=True)
class PageSource:
    """What every manifest says about the page: who digitized it, which edition, its citation URL, who publishes it."""

    institution: str
    edition: str  # title (year)
    citation_url: str
    site_name: str


@dataclass(frozen=True)
class Delivery:
    """What a per-request manifest says: the rendition delivered, whether it is marked, and to whom."""

    title: str  # the file name the response carries
    rendition_sha256: str  # of the stored tier the bytes came from
    marked: bool
    key_ref: str  # the key's public reference, never the key
    date: str  # ISO date of the delivery (UTC)
    pool: str  # the budget pool the delivery was metered in
    institution: str
    edition: str
    citation_url: str
    site_name: str
