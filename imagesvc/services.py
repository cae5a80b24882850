"""The services a tool needs, built once per process by ``build_app`` or the CLI and passed explicitly."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from imagesvc.catalog import Catalog
from imagesvc.catalog.gate import AsyncCatalog
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


class Services:
    """Settings, catalog and object store, plus the URL rules that depend on them.

    ``catalog`` and ``search`` (the gallery ``SearchEngine``, made on first use by ``engine_for``) are the node's own,
    or, once ``follow`` is given a source (a node serving catalog snapshots), the ones that source names: the
    generation the current request pinned."""

    def __init__(
        self, settings: Settings, catalog: Catalog, store: ObjectStore, colophon_secret: bytes = b"", search: Any = None
    ) -> None:
        self.settings = settings
        self.store = store
        self.colophon_secret = colophon_secret
        self._catalog = catalog
        self._search = search
        self._source: Callable[[], tuple[Catalog, Any]] | None = None

    @property
    def catalog(self) -> Catalog:
        return self._catalog if self._source is None else self._source()[0]

    @property
    def db(self) -> AsyncCatalog:
        """``catalog`` for the event loop: ``await services.db.find_book(x)`` runs the read on the catalog's own
        threads under its deadline (``imagesvc.catalog.gate``). Code on the loop never calls ``catalog`` itself."""
        return AsyncCatalog(self.catalog)

    @property
    def search(self) -> Any:
        return self._search if self._source is None else self._source()[1]

    @search.setter
    def search(self, engine: Any) -> None:
        """The node's own engine (``engine_for`` makes it on first use)."""
        self._search = engine

    @property
    def own(self) -> tuple[Catalog, Any]:
        """The node's own catalog and engine, whatever is followed."""
        return self._catalog, self._search

    def follow(self, source: Callable[[], tuple[Catalog, Any]] | None) -> None:
        """Read ``catalog`` and ``search`` from ``source()`` from now on (None: the node's own again)."""
        self._source = source

    def image_url(self, public_key: str) -> str:
        """Public URL of an object under ``pub/`` on the image host."""
        return f"{self.settings.image_base}/{public_key.removeprefix('pub/')}"

    def book_url(self, slug: str) -> str:
        return f"{self.settings.site_url}/book/{slug}"

    def page_url(self, slug: str, number: int) -> str:
        return f"{self.settings.site_url}/book/{slug}?page={number}"
