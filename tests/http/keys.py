"""API keys for the HTTP tests: one made in the test's own catalog, as ``imagesvc keys create`` would."""

from __future__ import annotations

from pathlib import Path

from imagesvc.catalog import Catalog
from imagesvc.catalog.api_keys import create_key

__all__ = ["new_key"]


def new_key(data_dir: Path, tier: str, name: str = "") -> tuple[str, str]:
    """A fresh key of ``tier`` in ``data_dir``'s catalog: (the secret a caller sends, the key's public id)."""
    catalog = Catalog(data_dir / "catalog.sqlite3")
    try:
        key, record = create_key(catalog, tier, name or f"test {tier}")
    finally:
        catalog.close()
    return key, record.id
