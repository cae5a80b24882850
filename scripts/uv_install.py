"""``uv pip install`` into a virtual environment with the package sources pip is configured with here.

    python scripts/uv_install.py VENV [uv pip install arguments...]

uv reads none of pip's configuration, and a machine may depend on it (a local wheel folder, a mirror, extra indexes,
a constraints file, a corporate CA): so pip's effective settings (``pip config list``: its files and ``PIP_*``
variables) are passed on as uv's options, and uv picks the best version across every index as pip does
(``--index-strategy unsafe-best-match``; uv's own default stops at the first index that has the package). Unlike
pip, uv compiles no bytecode unless asked (``UV_COMPILE_BYTECODE=1``): scripts/bootstrap.sh decides. Exits with
uv's status; scripts/bootstrap.sh falls back to pip when it is not 0. Standard library only.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["main", "pip_settings", "uv_command"]

# pip's option -> uv's option, for options whose value is a list (pip separates them by white space)
LISTS = {
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraints",
    "trusted-host": "--allow-insecure-host",
}


def pip_settings(listing: str) -> dict[str, str]:
    """pip's effective value of each option from ``pip config list`` output (``section.key='value'`` lines): a
    ``PIP_*`` variable (``:env:``) over the ``install`` section over ``global``, as pip reads them."""
    rank = {":env:": 3, "install": 2, "global": 1}
    found: dict[str, tuple[int, str]] = {}
    for line in listing.splitlines():
        name, sep, raw = line.partition("=")
        section, dot, key = name.rpartition(".")
        if not sep or not dot or section not in rank:
            continue
        try:
            value = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError):
            value = raw.strip()
        if key not in found or rank[section] > found[key][0]:
            found[key] = (rank[section], str(value))
    return {key: value for key, (_, value) in found.items()}


def uv_command(uv: str, python: str, settings: dict[str, str], args: list[str]) -> tuple[list[str], dict[str, str]]:
    """The uv command line and the environment variables it needs for pip's ``settings``."""
    command = [uv, "pip", "install", "--python", python, "--index-strategy", "unsafe-best-match"]
    env: dict[str, str] = {}
    if settings.get("index-url"):
        command += ["--index-url", settings["index-url"]]
    for key, option in LISTS.items():
        for value in settings.get(key, "").split():
            command += [option, value]
    if settings.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        command.append("--no-index")
    if settings.get("cert"):
        env["SSL_CERT_FILE"] = settings["cert"]
    if settings.get("default-timeout") or settings.get("timeout"):
        env["UV_HTTP_TIMEOUT"] = settings.get("default-timeout") or settings["timeout"]
    return command + args, env


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    venv = Path(argv[1])
    python, uv = venv / "bin" / "python", venv / "bin" / "uv"
    listing = ""
    for interpreter in (sys.executable, str(python)):  # the environment may have no pip yet (uv installs it)
        done = subprocess.run([interpreter, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False)
        if done.returncode == 0:
            listing = done.stdout
            break
    command, env = uv_command(str(uv), str(python), pip_settings(listing), argv[2:])
    return subprocess.run(command, env=os.environ | env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv))
