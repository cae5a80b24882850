"""`imagesvc keys`: a key is printed once, listed without its secret, and revoked by id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagesvc.catalog import Catalog
from imagesvc.catalog.api_keys import create_key, lookup_key
from imagesvc.cli import main


def test_create_list_revoke(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("IMAGESVC_DATA_DIR", str(tmp_path))
    assert main(["keys", "create", "--tier", "full", "--label", "press office", "--json"]) == 0
    created = json.loads(capsys.readouterr().out)
    key, key_id = created["key"], created["id"]
    assert key.startswith(f"isk_{key_id}_")
    catalog = Catalog(tmp_path / "catalog.sqlite3")
    stored = catalog.query_all("SELECT * FROM api_keys")
    assert key not in json.dumps(stored)  # only a hash is stored
    assert lookup_key(catalog, key).tier == "full"
    catalog.close()
    assert main(["keys", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(k["id"], k["tier"], k["state"], k["label"]) for k in listed] == [
        (key_id, "full", "active", "press office")
    ]
    assert key not in json.dumps(listed)
    assert main(["keys", "revoke", key_id]) == 0
    assert main(["keys", "revoke", key_id]) == 1  # already revoked
    assert main(["keys", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.split("\n", 1)[1])[0]["state"] == "revoked"


def test_unknown_tier_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMAGESVC_DATA_DIR", str(tmp_path))
    with pytest.raises(SystemExit):
        main(["keys", "create", "--tier", "platinum"])


def test_a_tier_typo_is_refused_the_same_way_by_the_command_and_the_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The one list of key tiers (the caller classes keys map to) refuses a typo with one message on every door."""
    monkeypatch.setenv("IMAGESVC_DATA_DIR", str(tmp_path))
    catalog = Catalog(tmp_path / "catalog.sqlite3")
    for typo in ("ful", "Full", "paid"):
        with pytest.raises(ValueError) as refused:
            create_key(catalog, typo)
        message = str(refused.value)
        assert message == f"unknown key tier {typo!r}; valid: free, language, domain, full, enterprise"
        with pytest.raises(SystemExit):
            main(["keys", "create", "--tier", typo])
        assert message in capsys.readouterr().err
    assert catalog.query_all("SELECT * FROM api_keys") == []
    catalog.close()
    for tier in ("free", "language", "domain", "full", "enterprise"):
        assert main(["keys", "create", "--tier", tier, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["tier"] == tier
