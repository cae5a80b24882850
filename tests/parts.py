"""Where a real part of the suite is missing: skip with the reason locally, fail under CI (``CI=true``).

Every test that needs something installed (a Python package, a system binary) goes through here, so that a broken CI
image turns into a red run instead of a suite of silent skips.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import NoReturn

import pytest

__all__ = ["import_part", "missing_part", "on_ci"]


def on_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def missing_part(reason: str) -> NoReturn:
    """Skip the calling test (or module) with ``reason``; under CI, fail it instead."""
    if on_ci():
        pytest.fail(f"CI=true and a part of the suite is missing: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def import_part(name: str, hint: str) -> ModuleType:
    """``importlib.import_module(name)``, or ``missing_part`` naming ``hint`` (how to install it)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing_part(f"{name} cannot be imported ({exc}); {hint}")
