"""The C2PA manifest definitions this service signs: one for a marked public tier, one for a delivery to a key.

Visible marks are described as ``c2pa.edited`` with a description: ``c2pa.watermarked`` is reserved for invisible
watermarks and fails validation without a soft binding. Ingredients are referenced by hash only: no master bytes and
no thumbnail go into a public file.
"""

from __future__ import annotations

from typing import Any

from imagesvc import __version__
from imagesvc.provenance import Delivery, PageSource

__all__ = ["DELIVERY_LABEL", "SOURCE_LABEL", "delivery_manifest", "public_manifest"]

SOURCE_LABEL = "org.imagesvc.source"
DELIVERY_LABEL = "org.imagesvc.delivery"
_MIME = {"JPEG": "image/jpeg", "PNG": "image/png", "TIFF": "image/tiff", "WEBP": "image/webp", "GIF": "image/gif"}
_TIER_WORDS = {"full": "native size", "display": "display size", "thumb": "thumbnail size"}


def _generator() -> list[dict[str, str]]:
    return [{"name": "imagesvc", "version": __version__}]


def _ingredient(title: str, sha256: str, fmt: str) -> dict[str, Any]:
    return {"title": title, "format": fmt, "relationship": "parentOf", "instance_id": f"urn:sha256:{sha256}"}


def _source(source: PageSource) -> dict[str, Any]:
    return {
        "label": SOURCE_LABEL,
        "data": {
            "digitized_by": source.institution,
            "edition": source.edition,
            "citation_url": source.citation_url,
            "published_by": source.site_name,
        },
    }


def public_manifest(source: PageSource, master_sha256: str, master_format: str, tier: str) -> dict[str, Any]:
    """The manifest of a marked public tier: master (by hash) opened, resized to the tier, the visible mark drawn."""
    master = _ingredient(
        f"page master ({master_format})", master_sha256, _MIME.get(master_format, "application/octet-stream")
    )
    actions: list[dict[str, Any]] = [
        {"action": "c2pa.opened", "parameters": {"ingredientIds": [master["instance_id"]]}},
    ]
    if tier != "full":
        actions.append({"action": "c2pa.resized", "description": f"scaled to the {_TIER_WORDS.get(tier, tier)} tier"})
    actions.append(
        {
            "action": "c2pa.edited",
            "description": f"visible provenance mark drawn: {source.site_name}, {source.citation_url}, "
            f"digitized by {source.institution}",
        }
    )
    return {
        "claim_generator_info": _generator(),
        "title": f"{source.citation_url} ({tier})",
        "format": "image/jpeg",
        "ingredients": [master],
        "assertions": [{"label": "c2pa.actions.v2", "data": {"actions": actions}}, _source(source)],
    }


def delivery_manifest(delivery: Delivery) -> dict[str, Any]:
    """The manifest of one delivery to a key: the stored tier (by hash) opened, the XMP note written, and to whom it
    went; a clean copy says that no visible mark was applied."""
    parent = _ingredient(
        f"stored {'marked' if delivery.marked else 'clean'} tier", delivery.rendition_sha256, "image/jpeg"
    )
    mark = "the visible provenance mark drawn at ingest" if delivery.marked else "no visible mark applied (clean copy)"
    source = PageSource(delivery.institution, delivery.edition, delivery.citation_url, delivery.site_name)
    actions = [
        {"action": "c2pa.opened", "parameters": {"ingredientIds": [parent["instance_id"]]}},
        {"action": "c2pa.edited.metadata", "description": "XMP provenance note naming the requester written"},
        {"action": "c2pa.published", "description": f"delivered to key {delivery.key_ref} on {delivery.date}; {mark}"},
    ]
    requester = {
        "key_ref": delivery.key_ref,
        "date": delivery.date,
        "pool": delivery.pool,
        "visible_mark": delivery.marked,
    }
    return {
        "claim_generator_info": _generator(),
        "title": delivery.title,
        "format": "image/jpeg",
        "ingredients": [parent],
        "assertions": [
            {"label": "c2pa.actions.v2", "data": {"actions": actions}},
            _source(source),
            {"label": DELIVERY_LABEL, "data": requester},
        ],
    }
