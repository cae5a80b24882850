"""Local features of an illustration: ORB keypoints (where) and their 256-bit binary descriptors (what).

ORB (OpenCV) is free of patents, fast (10-30 ms for a 900 px woodcut on one core), invariant to rotation and, through
its pyramid, to a scale change of about four, and its binary descriptors are compared by Hamming distance, which
faiss searches natively. Line art suits it: every stroke end, crossing and hatch corner is a keypoint.

Pictures are reduced before extraction (JPEG through Pillow's DCT ``draft``, so a 10 MB scan is never decoded in
full): stored illustrations to ``STORED_SIDE``, queries to ``QUERY_SIDE`` px on their long side.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
from PIL import Image

__all__ = ["QUERY_SIDE", "STORED_SIDE", "Features", "decode_reduced", "empty", "extract", "grey_reduced"]

STORED_SIDE = 800
QUERY_SIDE = 800
STORED_KEYPOINTS = 600
GRID = 8
QUERY_KEYPOINTS = 1500


@dataclass(frozen=True)
class Features:
    xy: np.ndarray  # float32 (n, 2), pixels of the reduced picture
    desc: np.ndarray  # uint8 (n, 32)
    size: tuple[int, int]  # (width, height) of the reduced picture
    shape: np.ndarray | None = None  # uint8 (n, 2): orientation (256ths of a turn) and pyramid level of each keypoint


def _shape(kps: list) -> np.ndarray:
    """Each keypoint's orientation in 256ths of a turn and the pyramid level it was found at: what a single pair of
    keypoints says about the rotation and scale between two pictures (``feature_index``'s weak geometry)."""
    return np.array([(round(k.angle * 256 / 360) % 256, k.octave & 0xFF) for k in kps], np.uint8).reshape(-1, 2)


def empty(size: tuple[int, int]) -> Features:
    return Features(np.zeros((0, 2), np.float32), np.zeros((0, 32), np.uint8), size, np.zeros((0, 2), np.uint8))


def grey_reduced(image: Image.Image, side: int) -> np.ndarray:
    """``image`` as a uint8 grey array at most ``side`` px on its long side (never enlarged)."""
    grey = image.convert("L")
    scale = side / max(grey.size)
    if scale < 1:
        grey = grey.resize(
            (max(1, round(grey.width * scale)), max(1, round(grey.height * scale))), Image.Resampling.BOX
        )
    return np.asarray(grey)


def decode_reduced(data: bytes, side: int) -> Image.Image:
    """Decode ``data`` cheaply at no less than ``side`` px (JPEG: DCT scaling), as a greyscale image."""
    image = Image.open(io.BytesIO(data))
    image.draft("L", (side, side))
    return image.convert("L")


def _orb(n: int) -> object:
    import cv2

    return cv2.ORB_create(nfeatures=n, scaleFactor=1.2, nlevels=8, edgeThreshold=19, patchSize=19, fastThreshold=12)


def _spread(kps: list, n: int, size: tuple[int, int], grid: int = GRID) -> list:
    """At most ``n`` keypoints, strongest first within each cell of a ``grid`` x ``grid`` division of the picture,
    taken from the cells in turn: hatching and dense strokes would otherwise take every keypoint, and a crop of a
    sparse corner would find none of its own."""
    if len(kps) <= n:
        return kps
    w, h = size
    cells: dict[int, list] = {}
    for k in sorted(kps, key=lambda k: -k.response):
        cx, cy = min(grid - 1, int(k.pt[0] * grid / w)), min(grid - 1, int(k.pt[1] * grid / h))
        cells.setdefault(cy * grid + cx, []).append(k)
    out: list = []
    queues = list(cells.values())
    depth = 0
    while len(out) < n and queues:
        queues = [q for q in queues if len(q) > depth]
        out.extend(q[depth] for q in queues[: n - len(out)])
        depth += 1
    return out


MIN_SIDE = 64  # px: smaller pictures (after reduction) yield no keypoints worth matching


def extract(image: Image.Image, side: int = STORED_SIDE, keypoints: int = STORED_KEYPOINTS) -> Features:
    """ORB keypoints and descriptors of ``image`` reduced to ``side`` px (at most ``keypoints`` of them, spread
    over the picture)."""
    import cv2

    cv2.setNumThreads(1)  # the caller decides the parallelism (one process per core when indexing)
    grey = grey_reduced(image, side)
    size = (grey.shape[1], grey.shape[0])
    if min(size) < MIN_SIDE:  # ORB's pyramid and patch need room: a sliver of a picture has no features
        return empty(size)
    orb = _orb(keypoints * 4)
    kps = _spread(list(orb.detect(grey, None)), keypoints, size)  # type: ignore[attr-defined]
    kps, desc = orb.compute(grey, kps)  # type: ignore[attr-defined]
    if desc is None or not kps:
        return empty(size)
    xy = np.array([k.pt for k in kps], np.float32)
    return Features(xy, np.ascontiguousarray(desc, np.uint8), size, _shape(kps))
