"""Local features of an illustration: ORB keypoints (where) and their 256-bit binary descriptors (what).

ORB (OpenCV) is free of patents, fast (10-30 ms for a 900 px woodcut on one core), invariant to rotation and, through
its pyramid, to a scale change of about four, and its binary descriptors are compared by Hamming distance, which
faiss searches natively. Line art suits it: every stroke end, crossing and hatch corner is a keypoint.

Pictures are reduced before extraction (JPEG through Pillow's DCT ``draft``, so a 10 MB scan is never decoded in
full): stored illustrations to ``STORED_SIDE`` px on their long side, queries to ``MatchParams.query_side``. The
stored side, keypoints and grid below are the index's format (named in ``block_index.params``); how a query is
described is a part of the ``MatchParams`` a search is given.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
from PIL import Image

from imagesvc.search.match_params import DEFAULT, MatchParams

__all__ = [
    "STORED_SIDE",
    "Features",
    "decode_reduced",
    "empty",
    "extract",
    "extract_query",
    "grey_reduced",
    "near_pairs",
]

STORED_SIDE = 800
STORED_KEYPOINTS = 600
GRID = 8


@dataclass(frozen=True)
class Features:
    xy: np.ndarray  # float32 (n, 2), pixels of the reduced picture
    desc: np.ndarray  # uint8 (n, 32)
    size: tuple[int, int]  # (width, height) of the reduced picture
    shape: np.ndarray | None = None  # uint8 (n, 2): orientation (256ths of a turn) and pyramid level of each keypoint
    keypoint: np.ndarray | None = None  # int64 (n,): the row whose keypoint each row describes (``None``: its own)
    fine: np.ndarray | None = None  # uint8 (n, 32): descriptors of ``FIT_PATCH`` when ``desc`` are of another patch

    @property
    def fit_desc(self) -> np.ndarray:
        """The descriptors that guided fits compare (``FIT_PATCH``'s): ``fine`` where kept, else ``desc``."""
        return self.desc if self.fine is None else self.fine

    def first_look(self) -> Features:
        """Only the rows that are keypoints of their own (``extract_query``'s further looks describe the first
        look's keypoints again): what geometry is fitted on, each place once."""
        if self.keypoint is None:
            return self
        n = int(np.count_nonzero(self.keypoint == np.arange(len(self.keypoint))))
        shape = self.shape[:n] if self.shape is not None else None
        fine = self.fine[:n] if self.fine is not None else None
        return Features(self.xy[:n], self.desc[:n], self.size, shape, fine=fine)


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


def _orb(n: int, patch: int = 19) -> object:
    import cv2

    return cv2.ORB_create(nfeatures=n, scaleFactor=1.2, nlevels=8, edgeThreshold=19, patchSize=patch, fastThreshold=12)


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


# The side of the patch each descriptor is drawn from, in pixels of its keypoint's pyramid level (keypoints are found
# and oriented on ORB's own 19 either way). A larger patch tells a stroke from its look-alikes in other pictures
# better: of a crop's true pairs, half again as many rank above every same-subject look-alike with 41 px (docs/
# search.md), but a recut copy of a block, whose strokes differ by a pixel or two, then agrees with it more too. So
# the descriptors that find candidates are of this patch, and the ones that fit a candidate to the query keypoint by
# keypoint (``feature_index``'s guided fits, which decide what is the same block) stay ORB's own 19 px
# (``Features.fine``). ``MatchParams.patch`` says which (``MatchParams.for_patch`` with the distances matching
# needs); an index holds one patch's descriptors (``block_index.params``).
DESCRIPTOR_PATCH = DEFAULT.patch
FIT_PATCH = 19
MIN_SIDE = 64  # px: smaller pictures (after reduction) yield no keypoints worth matching


def extract(
    image: Image.Image, side: int = STORED_SIDE, keypoints: int = STORED_KEYPOINTS, patch: int = DESCRIPTOR_PATCH
) -> Features:
    """ORB keypoints and descriptors (of ``patch`` px) of ``image`` reduced to ``side`` px (at most ``keypoints``
    of them, spread over the picture)."""
    grey = grey_reduced(image, side)
    return _extract_grey(grey, keypoints, patch)


def extract_query(image: Image.Image, params: MatchParams = DEFAULT) -> Features:
    """A query's features: ``extract``'s (``query_side``, ``query_keypoints``), and when the picture yields fewer
    than ``query_keypoints`` of them (a crop, a small photo), further looks: the picture reduced by each of
    ``coarser_levels`` pyramid steps in turn and
    described again, each look's descriptors kept (up to the room left) where they fall on a keypoint of the first
    look, as other descriptors of that keypoint (``Features.keypoint``; their levels in the first look's terms).

    A small query shares only a few dozen keypoints with a stored printing, and most of their descriptors lie 20
    bits or more from their stored twins, beyond the neighbours a large library returns. The same places sampled
    again from a reduced picture give descriptors of their own, some nearer the stored ones: on crops to a third
    of each side, half as many twins again within 16 bits (``docs/search.md``). Geometry still counts each place
    once. A query that fills the budget at once is looked at once; a small one costs no more than a full one."""
    keypoints, patch = params.query_keypoints, params.patch
    grey = grey_reduced(image, params.query_side)
    first = _extract_grey(grey, keypoints, patch)
    n = len(first.desc)
    if first.shape is None or n == 0:
        return first
    xy, desc, shape, of = [first.xy], [first.desc], [first.shape], [np.arange(n)]
    fine = [first.fine] if first.fine is not None else None
    room = keypoints - n
    w, h = first.size
    for levels in params.coarser_levels:
        if room < params.min_coarser:
            break
        small = (round(w * 1.2**-levels), round(h * 1.2**-levels))
        if min(small) < MIN_SIDE:
            break
        look = _extract_grey(np.asarray(Image.fromarray(grey).resize(small, Image.Resampling.BOX)), 2 * room, patch)
        if look.shape is None or not len(look.desc):
            break
        placed = look.xy * np.array([w / small[0], h / small[1]], np.float32)  # in the first picture's pixels
        at, on = near_pairs(placed, first.xy, params.same_place_px)
        gap = np.hypot(*(placed[at] - first.xy[on]).T)
        order = np.lexsort((gap, at))  # each keypoint of this look on its nearest of the first
        at, on = at[order], on[order]
        once = np.ones(len(at), bool)
        once[1:] = at[1:] != at[:-1]
        at, on = at[once][:room], on[once][:room]
        more = look.shape[at].copy()
        more[:, 1] += levels
        xy.append(first.xy[on])
        desc.append(look.desc[at])
        if fine is not None and look.fine is not None:
            fine.append(look.fine[at])
        shape.append(more)
        of.append(on)
        room -= len(at)
    if len(desc) == 1:
        return first
    return Features(
        np.concatenate(xy),
        np.concatenate(desc),
        first.size,
        np.concatenate(shape),
        np.concatenate(of).astype(np.int64),
        np.concatenate(fine) if fine is not None else None,
    )


def near_pairs(a: np.ndarray, b: np.ndarray, px: float) -> tuple[np.ndarray, np.ndarray]:
    """Every pair (i, j) with ``a[i]`` within ``px`` of ``b[j]``: ``b`` sorted by x, each ``a[i]`` compared only with
    the strip of ``b`` within ``px`` of its x (a twentieth of a full comparison for a query's 1,500 keypoints)."""
    order = np.argsort(b[:, 0], kind="stable")
    bx = b[order, 0]
    lo = np.searchsorted(bx, a[:, 0] - px)
    count = np.searchsorted(bx, a[:, 0] + px, side="right") - lo
    i = np.repeat(np.arange(len(a)), count)
    j = np.repeat(lo - np.cumsum(count) + count, count) + np.arange(int(count.sum()))
    d = a[i] - b[order[j]]
    close = (d**2).sum(1) <= px * px
    return i[close], order[j[close]]


def _extract_grey(grey: np.ndarray, keypoints: int, patch: int = DESCRIPTOR_PATCH) -> Features:
    import cv2

    cv2.setNumThreads(1)  # the caller decides the parallelism (one process per core when indexing)
    size = (grey.shape[1], grey.shape[0])
    if min(size) < MIN_SIDE:  # ORB's pyramid and patch need room: a sliver of a picture has no features
        return empty(size)
    kps = _spread(list(_orb(keypoints * 4).detect(grey, None)), keypoints, size)  # type: ignore[attr-defined]
    kps, desc = _orb(keypoints, patch).compute(grey, kps)  # type: ignore[attr-defined]
    if desc is None or not kps:
        return empty(size)
    fine = None
    if patch != FIT_PATCH:  # the same keypoints described again (a smaller patch keeps every one)
        kept, fine = _orb(keypoints, FIT_PATCH).compute(grey, kps)  # type: ignore[attr-defined]
        if fine is None or len(kept) != len(kps):
            raise RuntimeError(f"ORB kept {len(kept)} of {len(kps)} keypoints for the {FIT_PATCH} px patch")
        fine = np.ascontiguousarray(fine, np.uint8)
    xy = np.array([k.pt for k in kps], np.float32)
    return Features(xy, np.ascontiguousarray(desc, np.uint8), size, _shape(kps), fine=fine)
