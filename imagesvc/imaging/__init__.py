"""Pixel work: tier derivation, visible marks, perceptual hashes and metadata splicing.

Everything here is synchronous and CPU-bound; callers run it in a process pool or an executor, never on the event
loop. Foreign exceptions (Pillow's bad-image and decompression-bomb errors) are translated to ``ImageRejected`` here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["TIERS", "IllustrationRenditions", "MarkSpec", "PageRenditions", "Rendition", "TierSpec"]

TIERS = ("full", "display", "thumb")


@dataclass(frozen=True)
class TierSpec:
    """How tiers are derived: longest sides, JPEG quality, the decompression-bomb limit, and the mark threshold."""

    display: int = 2000
    thumb: int = 300
    quality: int = 88
    max_pixels: int = 250_000_000
    mark_min_side: int = 600


@dataclass(frozen=True)
class MarkSpec:
    """What a visible mark says: the site, the page's citation URL and the digitizing institution."""

    site: str
    citation_url: str
    institution: str
    # Also a faint diagonal mark across the page (IMAGESVC_FAINT_MARK). Left out of repr, so derivation digests of
    # existing pages do not change with it: `imagesvc marks rebake` applies a change of this setting.
    faint: bool = field(default=False, repr=False)


@dataclass(frozen=True)
class Rendition:
    """One encoded image of one tier (always JPEG) with its pixel size and content hash."""

    tier: str
    data: bytes
    width: int
    height: int
    sha256: str
    content_type: str = "image/jpeg"


@dataclass(frozen=True)
class IllustrationRenditions:
    """An illustration cropped from its page: clean and marked tiers, and perceptual hashes (hex strings)."""

    index: int
    clean: dict[str, Rendition]
    public: dict[str, Rendition]
    phash: str
    dhash: str


@dataclass(frozen=True)
class PageRenditions:
    """Everything derived from one page master in one decode."""

    master_format: str  # "JPEG", "PNG", "TIFF", ...
    width: int  # after EXIF orientation
    height: int
    clean: dict[str, Rendition]
    public: dict[str, Rendition]
    illustrations: list[IllustrationRenditions] = field(default_factory=list)
