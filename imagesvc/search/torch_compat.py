"""Import torch with torchvision usable, offline: shared by the CLIP encoder and the dense text model.

torchvision 0.28 wheels built against a newer torch miss two operator schemas (``nms``, ``qnms``), so ``import
torchvision`` (and with it open_clip and transformers) fails until they are declared. Neither model calls them.
"""

from __future__ import annotations

import os
import threading
from typing import Any

__all__ = ["import_torch"]

_lock = threading.Lock()
_library: Any = None


def import_torch() -> Any:
    """``torch``, with torchvision importable and the Hugging Face hub switched off (a name then fails at once
    instead of retrying the network for ~46 s)."""
    global _library
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    with _lock:
        import torch

        try:
            import torchvision  # noqa: F401
        except RuntimeError:
            if _library is None:
                _library = torch.library.Library("torchvision", "DEF")
                _library.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
                _library.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        return torch
