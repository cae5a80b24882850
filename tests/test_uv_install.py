"""scripts/uv_install.py gives uv the package sources pip is configured with: a machine whose wheels come from a
local folder, a mirror or extra indexes installs the same packages through uv as through pip."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("uv_install", ROOT / "scripts" / "uv_install.py")
assert _spec and _spec.loader
uv_install = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(uv_install)

LISTING = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.default-timeout='180'
:env:.find-links='/opt/wheels'
global.cert='/somewhere/else.pem'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/old-wheels'
global.index-url='https://mirror.example/simple'
install.no-index='false'
user.unrelated='ignored'
"""


def test_pips_sources_become_uvs_options_with_pips_precedence() -> None:
    settings = uv_install.pip_settings(LISTING)
    command, env = uv_install.uv_command("uv", "/v/bin/python", settings, ["--quiet", "-e", ".[text]"])
    assert command[:5] == ["uv", "pip", "install", "--python", "/v/bin/python"]
    pairs = list(zip(command[5:-3:2], command[6:-3:2], strict=True))
    assert ("--index-strategy", "unsafe-best-match") in pairs  # the best version across indexes, as pip picks it
    assert ("--index-url", "https://mirror.example/simple") in pairs
    assert ("--extra-index-url", "file:///opt/pypi/simple") in pairs
    assert ("--extra-index-url", "file:///opt/pypi-more/simple") in pairs
    assert ("--find-links", "/opt/wheels") in pairs and ("--find-links", "/opt/old-wheels") not in pairs  # PIP_*
    assert ("--constraints", "/etc/xdg/pip/constraints.txt") in pairs
    assert "--no-index" not in command
    assert command[-3:] == ["--quiet", "-e", ".[text]"]
    assert env == {"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt", "UV_HTTP_TIMEOUT": "180"}


def test_no_configuration_means_uvs_defaults_and_odd_lines_are_skipped() -> None:
    settings = uv_install.pip_settings("not a setting\nglobal.index-url\n=\n")
    command, env = uv_install.uv_command("uv", "py", settings, [])
    assert command == ["uv", "pip", "install", "--python", "py", "--index-strategy", "unsafe-best-match"]
    assert env == {}
