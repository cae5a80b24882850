"""Layers (DESIGN.md, rule 3), checked by import-linter against the contracts in pyproject.toml: entry points, then
the app's wiring, then the doors (web, pages), then everything else, which never imports the layers above it.

import-linter reads every import of every module (relative ones and those inside functions included). Every module and
package directly under ``imagesvc/`` must be named in a contract, so a new one is classified the day it is created.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from importlinter import cli

import imagesvc

ROOT = Path(imagesvc.__file__).parent
PYPROJECT = ROOT.parent / "pyproject.toml"


def _contracts() -> list[dict]:
    return tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]


def _named(contract: dict) -> set[str]:
    names = set(contract.get("source_modules", []))
    for layer in contract.get("layers", []):
        names |= {part.strip() for part in layer.replace("|", ":").split(":")}
    return names


def test_the_contracts_hold(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.lint_imports(config_filename=str(PYPROJECT), no_cache=True, no_logo=True)
    assert code == 0, capsys.readouterr().out


def test_every_top_level_module_is_in_a_contract() -> None:
    modules = {f"imagesvc.{p.stem}" for p in ROOT.glob("*.py") if p.name != "__init__.py"}
    modules |= {f"imagesvc.{p.name}" for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    named = set().union(*(_named(c) for c in _contracts()))
    assert not modules - named, "classify these in [tool.importlinter] (pyproject.toml)"
    assert not named - modules, "contracts name modules that no longer exist"
    lower = set(next(c for c in _contracts() if c["id"] == "lower-layers")["source_modules"])
    for package in ("catalog", "storage", "imaging", "ingest", "access", "search", "iiif", "surface", "tools"):
        assert f"imagesvc.{package}" in lower  # the lower layers the design names


def test_the_check_sees_relative_and_lazy_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same kind of contract over a small package whose lower modules reach the door relatively, inside a
    function, and from a top-level module (as ``imagesvc/serving.py`` once did, unseen by the folder scan)."""
    package = tmp_path / "layered"
    (package / "door").mkdir(parents=True)
    (package / "lower").mkdir()
    (package / "__init__.py").write_text("")
    (package / "door" / "__init__.py").write_text("KEY = 1\n")
    (package / "lower" / "__init__.py").write_text("")
    (package / "lower" / "lazy.py").write_text("def f():\n    from ..door import KEY\n    return KEY\n")
    (package / "top.py").write_text("from . import door\n")
    config = tmp_path / "contracts.toml"
    config.write_text(
        '[tool.importlinter]\nroot_package = "layered"\n\n[[tool.importlinter.contracts]]\nname = "lower"\n'
        'type = "forbidden"\nsource_modules = ["layered.lower", "layered.top"]\nforbidden_modules = ["layered.door"]\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cli.lint_imports(config_filename=str(config), no_cache=True, no_logo=True) == 1
    out = capsys.readouterr().out
    assert "layered.lower.lazy -> layered.door" in out
    assert "layered.top -> layered.door" in out
