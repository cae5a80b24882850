"""The services a tool needs, built once per process by ``build_app`` or the CLI and passed explicitly."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from imagesvc.catalog import Catalog
from imagesvc.storage import ObjectStore

__all__ = ["Services"]


@dataclass
class Services:
    """Settings, catalog and object store, plus the URL rules that depend on them."""

    settings: Any
    catalog: Catalog
    store: ObjectStore

    def image_url(self, public_key: str) -> str:
        """Public URL of an object under ``pub/`` on the image host."""
        return f"{self.settings.image_base}/{public_key.removeprefix('pub/')}"

    def book_url(self, slug: str) -> str:
        return f"{self.settings.site_url}/book/{slug}"

    def page_url(self, slug: str, number: int) -> str:
        return f"{self.settings.site_url}/book/{slug}?page={number}"
