"""The torchvision shim handles only the missing-operator failure it was written for, and keeps the hub's offline
switch out of the environment that the rest of the process (and what it starts) sees."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("torchvision") is None,
    reason="torch and torchvision are not installed (the clip extra)",
)

# torchvision's import made to fail with a given message, as a wheel built against another torch fails.
SCRIPT = """
import importlib.abc, os, sys

class Fail(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torchvision":
            raise RuntimeError(sys.argv[1])
        return None

sys.meta_path.insert(0, Fail())
from imagesvc.search.torch_compat import import_torch
try:
    import_torch()
    print("imported")
except RuntimeError as exc:
    print("raised:", exc)
print("env:", os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE"))
try:
    from huggingface_hub import constants
    print("hub offline:", constants.HF_HUB_OFFLINE)
except ImportError:
    print("hub offline: True")
"""


def _run(message: str) -> list[str]:
    env_clean = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, message], capture_output=True, text=True, timeout=180, env=env_clean, check=True
    )
    return done.stdout.splitlines()


def test_the_missing_operator_is_declared_and_the_hub_is_offline_without_touching_the_environment() -> None:
    assert _run("operator torchvision::nms does not exist") == ["imported", "env: None None", "hub offline: True"]


def test_any_other_torchvision_failure_is_raised() -> None:
    out = _run("CUDA driver initialization failed")
    assert out[0] == "raised: CUDA driver initialization failed"
    assert out[1] == "env: None None"
