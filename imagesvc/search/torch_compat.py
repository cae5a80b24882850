"""Import torch with torchvision usable, offline: shared by the CLIP encoder and the dense text model.

torchvision 0.28 wheels built against a newer torch miss two operator schemas (``nms``, ``qnms``), so ``import
torchvision`` (and with it open_clip and transformers) fails until they are declared. Neither model calls them. Only
that failure is handled; any other error of ``import torchvision`` is raised as it is.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["import_torch"]

_lock = threading.Lock()
_library: Any = None
# The message torch gives when torchvision registers a kernel for an operator whose schema this torch lacks.
_MISSING_OPERATOR = re.compile(r"operator torchvision::(nms|qnms) does not exist")
_OFFLINE = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


@contextlib.contextmanager
def _offline() -> Iterator[None]:
    """The Hugging Face hub switched off while the model libraries are first imported (they read these variables
    then), and the variables put back afterwards, so nothing else this process starts inherits them."""
    saved = {name: os.environ.get(name) for name in _OFFLINE}
    for name in _OFFLINE:
        os.environ.setdefault(name, "1")
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def import_torch() -> Any:
    """``torch``, with torchvision importable and the Hugging Face hub off for the model libraries (a model name then
    fails at once instead of retrying the network for ~46 s)."""
    global _library
    with _lock, _offline():
        import torch

        try:
            import torchvision  # noqa: F401
        except RuntimeError as exc:
            if not _MISSING_OPERATOR.search(str(exc)):
                raise
            if _library is None:
                _library = torch.library.Library("torchvision", "DEF")
                _library.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
                _library.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        with contextlib.suppress(ImportError):
            import huggingface_hub.constants  # noqa: F401 - reads HF_HUB_OFFLINE now, inside the scope
        return torch
