"""What one ingest run reports, and the work a pool worker does for one page (importable without the pipeline)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagesvc.errors import ImageRejected
from imagesvc.imaging import MarkSpec, TierSpec
from imagesvc.imaging.refusals import reason_of

if TYPE_CHECKING:
    from imagesvc.provenance.ingest import Provenance

__all__ = ["IngestSummary", "Refusal", "digest", "file_sha256", "render_file"]


@dataclass
class IngestSummary:
    """What one ingest run did."""

    books: int = 0
    books_skipped: int = 0
    pages: int = 0
    pages_rendered: int = 0
    illustrations: int = 0
    objects_written: int = 0
    refused: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def add(self, other: IngestSummary) -> None:
        """Count ``other`` (the run of the next manifest of a library) into this one."""
        for name in ("books", "books_skipped", "pages", "pages_rendered", "illustrations", "objects_written"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.refused += other.refused
        self.seconds = round(self.seconds + other.seconds, 3)

    def line(self) -> str:
        return (
            f"{self.books} books ({self.books_skipped} unchanged), {self.pages} pages "
            f"({self.pages_rendered} rendered), {self.illustrations} illustrations, "
            f"{self.objects_written} objects written, {len(self.refused)} refused, {self.seconds:.1f} s"
        )


@dataclass(frozen=True)
class Refusal:
    """A page refused by a worker: the public reason word, our message, and the decoder's own words for the log."""

    reason: str
    message: str
    detail: str = ""


def render_file(
    path: str,
    spec: TierSpec,
    mark: MarkSpec | None,
    bboxes: list[tuple[float, float, float, float]],
    provenance: Provenance | None = None,
):
    """Process-pool entry: read one master and derive everything from it (and sign the marked public tiers with
    ``provenance``'s C2PA manifest); a refusal comes back as a ``Refusal``."""
    from PIL import Image

    from imagesvc.imaging.renditions import render_page

    # Pillow's own bomb guard (process-wide, ~179 MP by default) would otherwise refuse what the setting allows.
    Image.MAX_IMAGE_PIXELS = spec.max_pixels
    try:
        result = render_page(Path(path).read_bytes(), spec, mark, bboxes)
    except ImageRejected as exc:
        cause = exc.__cause__
        return Refusal(reason_of(exc), exc.message, f"{type(cause).__name__}: {cause}" if cause else "")
    return provenance.sign(result) if provenance is not None else result  # C2PA: sign the marked public tiers


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


# Bump when tier or mark rendering changes in a way that should re-derive every page. 3: marks never cover content.
DERIVATION_VERSION = 3


def page_derivation(master_sha256: str, spec: TierSpec, mark: MarkSpec, bboxes: Any) -> str:
    """The digest of everything one page's tiers are derived from; ingest reuses, and a rebake skips, a page whose
    stored digest equals it. The faint mark counts only when on, so turning it off leaves earlier digests as they were
    (a rebake still redraws the pages it was drawn on)."""
    faint = ["faint"] if mark.faint else []
    return digest(DERIVATION_VERSION, master_sha256, asdict(spec), mark, bboxes, *faint)
