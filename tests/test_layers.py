"""Layers (docs/architecture.md), checked by import-linter against the contracts in pyproject.toml: entry points, then
the app's wiring, then the doors (web, pages), then everything else, which never imports the layers above it.

import-linter reads every import of every module (relative ones and those inside functions included). Every module and
package directly under ``imagesvc/`` must be named in a contract, so a new one is classified the day it is created.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import imagesvc

ROOT = Path(imagesvc.__file__).parent
PYPROJECT = ROOT.parent / "pyproject.toml"
# import-linter's own command, in a process of its own: it reconfigures logging, which would silence this process's
# loggers for the tests after it.
LINT = [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()"]


def _lint(config: Path, *python_path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, python_path), env.get("PYTHONPATH", "")])
    cmd = [*LINT, "--config", str(config), "--no-cache"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)


def _contracts() -> list[dict]:
    return tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]


def _named(contract: dict) -> set[str]:
    names = set(contract.get("source_modules", []))
    for layer in contract.get("layers", []):
        names |= {part.strip() for part in layer.replace("|", ":").split(":")}
    return names


def test_the_contracts_hold() -> None:
    done = _lint(PYPROJECT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_every_top_level_module_is_in_a_contract() -> None:
    modules = {f"imagesvc.{p.stem}" for p in ROOT.glob("*.py") if p.name != "__init__.py"}
    modules |= {f"imagesvc.{p.name}" for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    named = set().union(*(_named(c) for c in _contracts()))
    assert not modules - named, "classify these in [tool.importlinter] (pyproject.toml)"
    assert not named - modules, "contracts name modules that no longer exist"
    lower = set(next(c for c in _contracts() if c["id"] == "lower-layers")["source_modules"])
    for package in ("catalog", "storage", "imaging", "ingest", "access", "search", "iiif", "surface", "tools"):
        assert f"imagesvc.{package}" in lower  # the lower layers the design names


def test_the_check_sees_relative_and_lazy_imports(tmp_path: Path) -> None:
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
    done = _lint(config, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert "layered.lower.lazy -> layered.door" in out
    assert "layered.top -> layered.door" in out
