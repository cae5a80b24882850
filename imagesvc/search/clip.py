"""The CLIP encoder of the gallery: open_clip loaded lazily from operator-supplied weights, offline, off the event loop.

With ``IMAGESVC_CLIP_WEIGHTS`` empty there is no encoder at all (gallery search ranks by text only); ``random`` builds
the configured model with random weights, for tests and benchmarks only. ``torch`` and ``open_clip`` are imported on
first use, so code that never encodes never pays for them (~6 s).
"""

from __future__ import annotations

import json
import logging
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from imagesvc.errors import Unavailable
from imagesvc.search.torch_compat import import_torch

__all__ = ["TINY_MODEL", "ClipSpec", "Encoder", "clip_spec"]

log = logging.getLogger("imagesvc.search.clip")

# A model small enough to build in milliseconds on CPU, for tests and smoke runs: 64-d, 64-px images.
TINY_MODEL = "imagesvc-tiny"
_TINY_CONFIG = {
    "embed_dim": 64,
    "vision_cfg": {"image_size": 64, "layers": 2, "width": 64, "head_width": 32, "patch_size": 16},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2},
}
_import_lock = threading.Lock()
_open_clip: Any = None


@dataclass(frozen=True)
class ClipSpec:
    """Which model and weights to load; ``key`` names them in the vector index so a change forces a full re-embed."""

    model: str
    weights: str  # "" (off), "random", a file path, or "local-dir:DIR"
    device: str = "auto"
    threads: int = 2

    @property
    def enabled(self) -> bool:
        return bool(self.weights)

    @property
    def key(self) -> str:
        return f"{self.model}|{self.weights}"

    def describe(self) -> str:
        """One plain sentence on what CLIP search is doing, for /health, search responses and the logs."""
        if not self.weights:
            return "off: no CLIP weights configured (IMAGESVC_CLIP_WEIGHTS), gallery search ranks by text only"
        if self.weights == "random":
            return f"on with RANDOM weights ({self.model}): rankings are meaningless, for tests and benchmarks only"
        return f"on: {self.model} with weights {self.weights}"


def clip_spec(settings: Any) -> ClipSpec:
    return ClipSpec(settings.clip_model, settings.clip_weights, settings.clip_device, settings.clip_threads)


def _import_open_clip() -> Any:
    """``open_clip``, imported once; registers the tiny test model and works around torchvision's missing ops."""
    global _open_clip
    with _import_lock:
        if _open_clip is not None:
            return _open_clip
        import_torch()
        import open_clip

        folder = Path(tempfile.mkdtemp(prefix="imagesvc-clip-"))
        (folder / f"{TINY_MODEL}.json").write_text(json.dumps(_TINY_CONFIG))
        open_clip.add_model_config(folder)
        _open_clip = open_clip
        return open_clip


class Encoder:
    """Image and text embeddings as L2-normalised float32 rows. Thread-safe; the model loads on first use.

    Raises ``Unavailable`` when the configured weights cannot be loaded (the message names the setting).
    """

    def __init__(self, spec: ClipSpec) -> None:
        if not spec.enabled:
            raise ValueError("CLIP is off: no weights configured")
        self.spec = spec
        self._lock = threading.Lock()
        self._model: Any = None
        self._preprocess: Any = None
        self._tokenizer: Any = None
        self._device = "cpu"
        self.dims = 0

    def load(self) -> None:
        """Build the model (blocking: call it in a thread)."""
        with self._lock:
            if self._model is not None:
                return
            open_clip = _import_open_clip()
            import torch

            torch.set_num_threads(self.spec.threads)
            want = self.spec.device
            self._device = "cuda" if want == "cuda" or (want == "auto" and torch.cuda.is_available()) else "cpu"
            name, pretrained = self.spec.model, self.spec.weights
            if pretrained == "random":
                pretrained = None
            elif pretrained.startswith("local-dir:"):
                name, pretrained = pretrained, None  # the folder holds both the config and the weights
            torch.manual_seed(0)  # random weights must be the same in the index job and in the server
            try:
                model, _, preprocess = open_clip.create_model_and_transforms(
                    name, pretrained=pretrained, device=self._device
                )
                tokenizer = open_clip.get_tokenizer(name)
            except Exception as exc:  # open_clip raises many types; all mean "these weights cannot be used"
                raise Unavailable(
                    f"CLIP model {self.spec.model!r} with weights {self.spec.weights!r} cannot be loaded: {exc}",
                    recovery=["Check IMAGESVC_CLIP_MODEL and IMAGESVC_CLIP_WEIGHTS (see docs/search.md)."],
                ) from exc
            if self._device == "cuda":
                model = model.half()
            model.eval()
            self._preprocess, self._tokenizer = preprocess, tokenizer
            self.dims = int(model.text_projection.shape[1]) if hasattr(model, "text_projection") else 0
            self._model = model
            log.info("CLIP %s on %s, %d-d", self.spec.describe(), self._device, self.dims)

    @property
    def device(self) -> str:
        """Where the model runs: "cuda" or "cpu" (loads the model)."""
        self.load()
        return self._device

    @property
    def image_size(self) -> int:
        self.load()
        size = self._model.visual.image_size
        return int(size[0] if isinstance(size, tuple | list) else size)

    def encode_images(self, images: Sequence[Any]) -> np.ndarray:
        """Embeddings of PIL images, one normalised row each (blocking)."""
        self.load()
        import torch

        batch = torch.stack([self._preprocess(image) for image in images]).to(self._device)
        if self._device == "cuda":
            batch = batch.half()
        with torch.inference_mode():
            out = self._model.encode_image(batch)
        return _normalise(out.float().cpu().numpy())

    def encode_pixels(self, pixels: Any) -> np.ndarray:
        """Embeddings of N × S × S × 3 uint8 pixels (numpy, or a tensor already on the device), one row each.

        The transform's normalisation runs here as tensor arithmetic on the model's device, so the host only ever
        moves uint8 bytes (a quarter of float32's); see ``imagesvc.search.prepare`` for the resize and crop.
        """
        self.load()
        import torch

        if isinstance(pixels, np.ndarray):
            pixels = torch.from_numpy(pixels if pixels.flags.writeable else pixels.copy())
        batch = pixels
        if batch.device.type != self._device:
            batch = (batch.pin_memory() if self._device == "cuda" else batch).to(self._device, non_blocking=True)
        mean, std = self._stats
        dtype = torch.float16 if self._device == "cuda" else torch.float32
        batch = batch.permute(0, 3, 1, 2).to(dtype).div_(255).sub_(mean.to(dtype)).div_(std.to(dtype))
        with torch.inference_mode():
            out = self._model.encode_image(batch.contiguous(memory_format=torch.channels_last))
        return _normalise(out.float().cpu().numpy())

    def decode_on_device(self, datas: Sequence[bytes | None]) -> tuple[Any, list[int]]:
        """Decode and resize a slice of encoded images on the GPU (nvJPEG); N × S × S × 3 uint8 and kept positions.

        Images the GPU decoder refuses (not JPEG, CMYK, corrupt) are prepared on the CPU instead; undecodable ones
        are left out, as ``prepare_slice`` does.
        """
        from imagesvc.search.gpu_decode import decode_resize

        self.load()
        return decode_resize(datas, self.image_size, self._device)

    @property
    def _stats(self) -> tuple[Any, Any]:
        import torch

        cfg = getattr(self._model.visual, "preprocess_cfg", {}) or {}
        mean = cfg.get("mean", (0.48145466, 0.4578275, 0.40821073))
        std = cfg.get("std", (0.26862954, 0.26130258, 0.27577711))
        shape = (1, 3, 1, 1)
        return (
            torch.tensor(mean, device=self._device).view(shape),
            torch.tensor(std, device=self._device).view(shape),
        )

    def encode_text(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings of text queries, one normalised row each (blocking)."""
        self.load()
        import torch

        tokens = self._tokenizer(list(texts)).to(self._device)
        with torch.inference_mode():
            out = self._model.encode_text(tokens)
        return _normalise(out.float().cpu().numpy())


def _normalise(rows: np.ndarray) -> np.ndarray:
    rows = rows.astype(np.float32, copy=False)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.maximum(norms, 1e-12)
