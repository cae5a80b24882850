"""Choosing the PostgreSQL catalog: the settings refuse what cannot work, and ``imagesvc doctor`` reports the
database's reachability and schema."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from imagesvc.catalog.backends import open_catalog
from imagesvc.catalog.postgres import PostgresCatalog
from imagesvc.catalog.schema import SCHEMA_VERSION
from imagesvc.doctor import _catalog
from imagesvc.settings import SettingsError, load_settings
from tests.servers import PostgresServer, create_database, refused_port


def test_postgres_needs_a_url_and_refuses_catalog_snapshots() -> None:
    with pytest.raises(SettingsError, match="IMAGESVC_DATABASE_URL must be set"):
        load_settings({"IMAGESVC_CATALOG": "postgres"})
    with pytest.raises(SettingsError, match="SQLite catalogs only"):
        load_settings(
            {
                "IMAGESVC_CATALOG": "postgres",
                "IMAGESVC_DATABASE_URL": "postgresql://db/x",
                "IMAGESVC_SNAPSHOT_PREFIX": "snapshots",
            }
        )
    with pytest.raises(SettingsError, match="IMAGESVC_CATALOG"):
        load_settings({"IMAGESVC_CATALOG": "mysql"})
    with pytest.raises(SettingsError, match="IMAGESVC_DATABASE_POOL_TIMEOUT"):
        load_settings({"IMAGESVC_DATABASE_POOL_TIMEOUT": "0"})
    assert load_settings({}).catalog == "sqlite"  # the embedded default: make run needs no server


def test_open_catalog_and_doctor_on_postgres(postgres_server: PostgresServer, tmp_path: Path) -> None:
    url = create_database(postgres_server, f"doc_{secrets.token_hex(5)}")
    env = {"IMAGESVC_CATALOG": "postgres", "IMAGESVC_DATABASE_URL": url, "IMAGESVC_DATA_DIR": str(tmp_path)}
    settings = load_settings(env)
    fresh = _catalog(settings)
    assert (fresh.level, fresh.check) == ("warn", "catalog") and "migrated on the next open" in fresh.message
    catalog = open_catalog(settings)
    try:
        assert isinstance(catalog, PostgresCatalog) and catalog.schema_version == SCHEMA_VERSION
    finally:
        catalog.close()
    assert not list(tmp_path.iterdir())  # nothing written to the data dir
    current = _catalog(settings)
    assert current.level == "ok" and f"schema {SCHEMA_VERSION} is current" in current.message
    with refused_port() as port:
        down = _catalog(load_settings(env | {"IMAGESVC_DATABASE_URL": f"postgresql://postgres@127.0.0.1:{port}/x"}))
    assert down.level == "fail" and "cannot be reached" in down.message
