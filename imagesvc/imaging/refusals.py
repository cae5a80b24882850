"""Why a master was refused: a fixed public vocabulary, and the one constructor of ``ImageRejected`` for it.

The reason word is what the catalog stores and the API shows as ``image_unavailable_reason``; the message (which
names the file and what is wrong, in our words, never Pillow's) goes to the operator and the log.
"""

from __future__ import annotations

from typing import Any

from imagesvc.errors import ImageRejected

__all__ = ["NOT_HELD", "REASONS", "reason_of", "refused"]

# The page's master was refused at ingest because its data ...
REASONS = {
    "corrupt": "is damaged or inconsistent",
    "truncated": "stops before the image its header declares is complete",
    "too_large": "declares more pixels than this service accepts (IMAGESVC_MAX_IMAGE_PIXELS)",
    "unsupported_format": "is not in an image format this service reads",
    "bad_region": "an illustration's box does not fit the page",
}
# The manifest names no image for the page.
NOT_HELD = "not_held"


def refused(reason: str, message: str, **details: Any) -> ImageRejected:
    """An ``ImageRejected`` carrying ``reason`` (one of ``REASONS``) in its details."""
    if reason not in REASONS:
        raise ValueError(f"unknown refusal reason {reason!r}")
    return ImageRejected(message, details={"reason": reason, **details})


def reason_of(exc: ImageRejected) -> str:
    """The public reason word of a refusal (``corrupt`` when none was given)."""
    reason = exc.details.get("reason")
    return reason if reason in REASONS else "corrupt"
