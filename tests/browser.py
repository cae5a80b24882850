"""Headless Chromium for the suite: whether it can run here, and one run of a ``viewer/*.mjs`` driver script.

The drivers use playwright-core (no browser download) on the system Chromium; ``scripts/install-viewer.sh`` installs
both. Where they are missing a module's tests are skipped with the reason, or fail under ``CI=true`` (tests/parts.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

from PIL import Image

from tests.parts import missing_part

__all__ = ["CHROMIUM", "MODULES", "VIEWER", "missing", "require", "run_driver", "save_compact"]

VIEWER = Path(__file__).resolve().parents[1] / "viewer"
MODULES = VIEWER / "node_modules"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


def missing(*needed: Path) -> str:
    """Why the browser cannot run here ("" when it can); ``needed``: files or npm packages beyond playwright-core."""
    if shutil.which("node") is None:
        return "node is not installed"
    absent = [p for p in (MODULES / "playwright-core", *needed) if not p.exists()]
    if absent:
        names = ", ".join(str(p.relative_to(VIEWER.parent)) for p in absent)
        return f"{names} missing: run scripts/install-viewer.sh"
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is missing: run scripts/install-viewer.sh as root (Debian package chromium)"
    return ""


def require(*needed: Path) -> None:
    """Call at a test module's import: skip the module (fail under CI) when the browser cannot run, so that a machine
    without it does not build the demo library only to skip."""
    reason = missing(*needed)
    if reason:
        missing_part(f"headless Chromium cannot run: {reason}")


async def run_driver(script: Path, *args: str, timeout: float) -> dict[str, Any]:
    """Run ``node script args...`` and return the JSON object its last line prints; the test's servers keep serving
    on this loop meanwhile. ``timeout`` only stops a hung browser."""
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(script),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "CHROMIUM": CHROMIUM},
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout=timeout)
    assert proc.returncode == 0, f"{script.name} failed ({proc.returncode}): {stderr.decode()[-3000:]}"
    return json.loads(stdout.decode().strip().splitlines()[-1])


def save_compact(shot: Path, target: Path) -> None:
    """Save a compact copy (256-colour PNG) of a screenshot, for the docs."""
    with Image.open(shot) as image:
        image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(target, optimize=True)
