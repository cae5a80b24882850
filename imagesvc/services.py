"""The services a tool needs, built once per process by ``build_app`` or the CLI and passed explicitly."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagesvc.catalog import Catalog
from imagesvc.settings import Settings
from imagesvc.storage import ObjectStore

__all__ = ["Services", "colophon_secret"]


def colophon_secret(settings: Settings) -> bytes:
    """The secret that signs provenance notes: ``IMAGESVC_COLOPHON_SECRET``, or one generated once and kept (mode
    0600) in the data dir, so notes stay verifiable across restarts. Several nodes must share one explicitly."""
    if settings.colophon_secret:
        return settings.colophon_secret.encode()
    path = Path(settings.data_dir) / "colophon.secret"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".colophon.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32))
        try:
            os.link(tmp, path)  # first writer wins; a concurrent start reads the winner's secret
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return path.read_text().strip().encode()


@dataclass
class Services:
    """Settings, catalog and object store, plus the URL rules that depend on them."""

    settings: Settings
    catalog: Catalog
    store: ObjectStore
    colophon_secret: bytes = b""
    search: Any = None  # the gallery SearchEngine, made on first use by imagesvc.search.engine.engine_for

    def image_url(self, public_key: str) -> str:
        """Public URL of an object under ``pub/`` on the image host."""
        return f"{self.settings.image_base}/{public_key.removeprefix('pub/')}"

    def book_url(self, slug: str) -> str:
        return f"{self.settings.site_url}/book/{slug}"

    def page_url(self, slug: str, number: int) -> str:
        return f"{self.settings.site_url}/book/{slug}?page={number}"
