"""Layers: no package below the doors imports the web layer or the pages (DESIGN.md, rule 3).

Every package of imagesvc other than the doors (``web``, ``pages``) is checked, imports inside functions included, so
a new package is covered the day it is created.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import imagesvc

ROOT = Path(imagesvc.__file__).parent
DOORS = {"web", "pages"}
LOWER = sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").exists() and p.name not in DOORS)


def door_imports(path: Path) -> list[str]:
    """Every import of ``imagesvc.web`` or ``imagesvc.pages`` in one file, as ``line: module``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found += [
            f"{node.lineno}: {n}" for n in names if n.split(".")[:2] in (["imagesvc", "web"], ["imagesvc", "pages"])
        ]
    return found


def test_the_lower_layers_are_the_ones_the_design_names() -> None:
    assert {"catalog", "storage", "imaging", "ingest", "access", "search", "iiif", "surface", "tools"} <= set(LOWER)


@pytest.mark.parametrize("package", LOWER)
def test_no_lower_package_imports_a_door(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files
    bad = {str(f.relative_to(ROOT.parent)): door_imports(f) for f in files}
    assert not {f: hits for f, hits in bad.items() if hits}


def test_the_check_sees_a_lazy_import(tmp_path: Path) -> None:
    source = tmp_path / "lazy.py"
    source.write_text("def f():\n    from imagesvc.web.app_keys import SERVICES\n    import imagesvc.pages\n")
    assert door_imports(source) == [
        "2: imagesvc.web.app_keys",
        "2: imagesvc.web.app_keys.SERVICES",
        "3: imagesvc.pages",
    ]
