"""Open the catalog the settings name: SQLite in the data dir (the default) or PostgreSQL (``IMAGESVC_CATALOG``)."""

from __future__ import annotations

from typing import Any

from imagesvc.catalog import Catalog

__all__ = ["open_catalog"]


def open_catalog(settings: Any, *, serving: bool = False) -> Catalog:
    """The configured catalog, migrated to the current schema. ``serving`` bounds each PostgreSQL statement and opens
    it lazily (a serving process starts while the database is down, and answers 503 until it is back), where ingest
    and index run long scans and writes unbounded, and need the database at once. A serving catalog warns when it is
    called on the event loop (``imagesvc.catalog.gate.CatalogOnLoop``)."""
    if getattr(settings, "catalog", "sqlite") == "postgres":
        try:
            from imagesvc.catalog.postgres import PostgresCatalog
        except ImportError as exc:
            raise RuntimeError(
                f"IMAGESVC_CATALOG=postgres needs psycopg, which is not installed ({exc}): "
                "pip install 'imagesvc[postgres]'"
            ) from exc

        return PostgresCatalog(
            settings.database_url,
            pool_size=settings.database_pool_size,
            pool_timeout=settings.database_pool_timeout,
            statement_timeout_ms=5000 if serving else 0,
            deadline=settings.catalog_deadline,
            lazy=serving,
            guard=serving,
        )
    return Catalog(settings.data_dir / "catalog.sqlite3", deadline=settings.catalog_deadline, guard=serving)
