"""The ingest side of Content Credentials: what a page's public tiers are signed with, made picklable for the pool."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from imagesvc.imaging import PageRenditions
from imagesvc.provenance import PageSource, SigningPaths
from imagesvc.provenance.credentials import signing_paths

__all__ = ["Provenance", "edition_text", "page_provenance", "page_source", "rebake_provenance"]


def edition_text(title: str, year: int | None) -> str:
    """How manifests and notes name an edition: ``Title (1598)``, as the XMP note does."""
    return title + (f" ({year})" if year else "")


@dataclass(frozen=True)
class Provenance:
    """Everything a pool process needs to sign one page's marked public tiers: no key bytes, only their paths."""

    source: PageSource
    master_sha256: str
    paths: SigningPaths
    master_format: str = ""  # known to rebake from the catalog; at ingest it comes with the rendered page

    def sign(self, page: PageRenditions) -> PageRenditions:
        from imagesvc.provenance.sign import sign_page  # c2pa loads in the pool process, not at import

        return sign_page(page, self.source, self.master_sha256, self.paths)

    def sign_tier(self, tier: str, data: bytes) -> bytes:
        """One marked tier signed (``marks rebake``); the master's format comes from the catalog row."""
        from imagesvc.provenance.manifests import public_manifest
        from imagesvc.provenance.sign import sign_jpeg

        return sign_jpeg(data, public_manifest(self.source, self.master_sha256, self.master_format, tier), self.paths)


def page_source(settings: Any, slug: str, number: int, institution: str, edition: str) -> PageSource:
    citation = f"{settings.site_url}/book/{slug}?page={number}"
    return PageSource(institution, edition, citation, settings.site_name)


def page_provenance(settings: Any, book: dict[str, Any], number: int, master_sha256: str) -> Provenance | None:
    """The signing job for a page of a manifest ``book``, or None when IMAGESVC_C2PA_SIGN is off."""
    if not settings.c2pa_sign:
        return None
    edition = edition_text(book["title"], book.get("year"))
    source = page_source(settings, book["slug"], number, book["attribution"]["institution"], edition)
    return Provenance(source, master_sha256, signing_paths(settings))


def rebake_provenance(settings: Any, book: dict[str, Any], page: dict[str, Any]) -> Provenance | None:
    """The signing job for a stored page (catalog rows of its book and page), or None when signing is off."""
    if not settings.c2pa_sign:
        return None
    edition = edition_text(book["title"], book["year"])
    source = page_source(settings, book["slug"], page["number"], book["institution"], edition)
    return Provenance(source, page["master_sha256"], signing_paths(settings), page["master_format"] or "")
