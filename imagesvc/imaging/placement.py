"""Where a visible mark may go: the page's content found from its pixels, and the largest empty margin that holds a
box of a given size, or none (then the mark goes in a strip added outside the page, ``imaging/marks.py``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageFilter

__all__ = ["EDGES", "PLACEMENT", "Content", "MarkPlacement", "find_content"]

EDGES = ("bottom", "top", "right", "left")  # tried in this order at each font size


@dataclass(frozen=True)
class MarkPlacement:
    """The tuned constants of mark placement, chosen by ``benchmarks/visible_mark.py`` and held by
    ``tests/imaging/test_mark_placement.py``."""

    detect_side: int = 500  # content is found on a grid of at most this many cells along the longer side
    paper_percentile: float = 90.0  # the paper's colour: the median of the pixels at this grey percentile and above
    paper_min: int = 120  # ... and is paper only if no channel of it is darker than this
    paper_chroma: int = 90  # ... nor its channels further apart than this (an orange plate is not paper)
    ink_delta: int = 40  # a cell holding a pixel off the paper's colour by more than this (in a channel) is content
    guard: float = 0.012  # clear space kept between content and the mark, as a share of the page's shorter side
    guard_min_px: int = 16  # ... and never less than one JPEG block row (4:2:0) of the tier it is planned on
    font_per_width: float = 0.014  # the nominal font size, px per px of page width: 20 px on a 1400 px display
    min_font_share: float = 0.8  # a margin takes the mark at no less than this share of the nominal font
    max_area: float = 0.12  # a mark inside the page never covers more than this share of its area


PLACEMENT = MarkPlacement()


@dataclass(frozen=True)
class Content:
    """The page's content on a grid of ``cell`` x ``cell`` px cells (``blocked``: content grown by the guard)."""

    blocked: np.ndarray  # bool, rows x cols: True where a mark would touch or come too near content
    cell: int
    width: int
    height: int

    def fit(self, edge: str, length: int, depth: int) -> tuple[int, int, int, int] | None:
        """The page-pixel box ``(left, top, right, bottom)`` free of content, ``length`` px along ``edge`` and ``depth``
        px deep, flush with that edge and nearest its middle; None when no such box is free.

        Along ``right`` and ``left`` the box is upright (``depth`` wide, ``length`` high).
        """
        grid = _as_bottom(self.blocked, edge)
        across = edge in ("bottom", "top")
        span, room = (self.width, self.height) if across else (self.height, self.width)
        if length > span or depth > room:
            return None
        rows, cols = grid.shape
        c = self.cell
        # The grid's last row and column may hold fewer pixels than a cell; they lie at the page's bottom and right.
        deep_pad = rows * c - room if edge in ("bottom", "right") else 0
        need_rows = math.ceil((depth + deep_pad) / c)
        need_cols = math.ceil(length / c)
        if need_cols > cols:
            return None
        flipped = grid[::-1]
        free = np.where(flipped.any(axis=0), flipped.argmax(axis=0), rows)  # empty cells from the edge, per column
        windows = np.lib.stride_tricks.sliding_window_view(free, need_cols).min(axis=1)
        starts = np.flatnonzero(windows >= need_rows)
        # Where the grid runs along the page's foot (right edge) or along its width (bottom, top), its far end may
        # be a part cell: keep only windows that hold ``length`` page pixels.
        lead_pad = cols * c - span if edge == "right" else 0
        first_px = starts * c - lead_pad
        last_px = np.minimum((starts + need_cols) * c - lead_pad, span)
        starts = starts[(np.maximum(first_px, 0) + length) <= last_px]
        if starts.size == 0:
            return None
        middle = (cols - need_cols) / 2
        best = int(starts[np.argmin(np.abs(starts - middle))])
        low = max(best * c - lead_pad, 0)
        high = min((best + need_cols) * c - lead_pad, span)
        offset = low + (high - low - length) // 2  # along the edge, from the start of the rotated frame
        if edge == "bottom":
            return offset, self.height - depth, offset + length, self.height
        if edge == "top":
            return offset, 0, offset + length, depth
        if edge == "right":  # the rotated frame starts at the page's foot
            return self.width - depth, self.height - offset - length, self.width, self.height - offset
        return 0, offset, depth, offset + length


def _as_bottom(grid: np.ndarray, edge: str) -> np.ndarray:
    """``grid`` turned so that ``edge`` is its bottom row, read left to right as the mark's text reads."""
    if edge == "bottom":
        return grid
    if edge == "top":
        return grid[::-1]
    if edge == "right":
        return np.rot90(grid, -1)  # clockwise: the right column becomes the bottom row, the page's foot its start
    return np.rot90(grid, 1)  # left: counter-clockwise, the page's head its start


def find_content(img: Image.Image, params: MarkPlacement = PLACEMENT) -> Content:
    """Find ``img``'s content (text, ink, plates: anything whose colour is off the paper's) and grow it by the guard.

    The paper's colour is taken from the page's lightest part (its grey levels at ``params.paper_percentile`` and
    above); a pixel is content when a channel differs from it by more than ``params.ink_delta``, so dark ink and
    light coloured fills of a plate count alike. Each grid cell takes its most different pixel, so a hairline or a
    faint marginal note in it counts; a plate that bleeds to every edge is content everywhere. Deterministic.
    """
    width, height = img.size
    rgb = np.asarray(img.convert("RGB"), dtype=np.int16)
    grey = np.asarray(img.convert("L"), dtype=np.int16)
    sample, tones = grey[::3, ::3], rgb[::3, ::3]
    light = sample >= np.percentile(sample, params.paper_percentile)
    paper = np.median(tones[light], axis=0).astype(np.int16)
    if int(paper.min()) < params.paper_min or int(paper.max() - paper.min()) > params.paper_chroma:
        # The page's lightest part is no paper (a plate of dark or strong colour to every edge): all is content.
        return Content(np.ones((1, 1), dtype=bool), max(width, height), width, height)
    off = np.abs(rgb - paper).max(axis=2)
    cell = max(1, math.ceil(max(width, height) / params.detect_side))
    rows, cols = math.ceil(height / cell), math.ceil(width / cell)
    padded = np.zeros((rows * cell, cols * cell), dtype=np.int16)
    padded[:height, :width] = off
    most = padded.reshape(rows, cell, cols, cell).max(axis=(1, 3))
    content = most > params.ink_delta
    guard_px = max(params.guard_min_px, params.guard * min(width, height))
    reach = math.ceil(guard_px / cell)
    grown = Image.fromarray(content.astype(np.uint8) * 255).filter(ImageFilter.MaxFilter(2 * reach + 1))
    return Content(np.asarray(grown) > 0, cell, width, height)
