"""Generated display-tier pages whose text or plates run to the edges, for the visible-mark benchmark and tests.

Seeded and deterministic: ``page(kind, seed)`` draws one page of a kind; ``pages(n, seed)`` cycles through the kinds.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from PIL import Image, ImageDraw, ImageFont

__all__ = ["KINDS", "page", "pages"]

_SERIF = "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf"
_LATIN = "liber de arte moriendi capitulum primum temptationibus morientium fides spes caritas quoniam omnis homo natus"
_WORDS = (_LATIN + " est mori et post hoc iudicium sicut scriptum est in libro sapientiae tractatus herbarum").split(
    " "
)
_HEBREW = [chr(c) for c in range(0x05D0, 0x05EB)]
KINDS = ("full", "narrow", "spread", "rtl", "plate", "marginalia", "ordinary")


def _paper(rng: np.random.Generator, width: int, height: int) -> Image.Image:
    tone = rng.integers(215, 245)
    y, x = np.ogrid[0:height, 0:width]
    base = np.empty((height, width, 3), dtype=np.int16)
    shade = (8 * np.sin(x / (300 + 200 * rng.random())) * np.cos(y / 400)).astype(np.int16)
    base[..., 0] = tone + shade
    base[..., 1] = tone - 10 + shade
    base[..., 2] = tone - 35 + shade
    base += rng.integers(-4, 5, (height, width, 1), dtype=np.int16)
    return Image.fromarray(np.clip(base, 0, 255).astype(np.uint8), "RGB")


def _line(rng: np.random.Generator, n: int, rtl: bool = False) -> str:
    if rtl:
        return " ".join("".join(rng.choice(_HEBREW, int(rng.integers(2, 7)))) for _ in range(n))
    return " ".join(str(rng.choice(_WORDS)) for _ in range(n))


def _text_block(
    image: Image.Image,
    rng: np.random.Generator,
    box: tuple[int, int, int, int],
    size: int,
    *,
    rtl: bool = False,
    ink: tuple[int, int, int] = (40, 28, 20),
) -> None:
    """Lines of ``size`` px type filling ``box`` (left, top, right, bottom), cut at its sides as a justified block."""
    font = ImageFont.truetype(_SERIF, size)
    left, top, right, bottom = box
    layer = Image.new("L", (right - left, max(1, bottom - top + size)), 0)
    pen = ImageDraw.Draw(layer)
    y = 0
    while y < bottom - top:
        text = _line(rng, 30, rtl)
        if rtl:
            pen.text((layer.width, y), text, font=font, fill=255, anchor="ra")
        else:
            pen.text((0, y), text, font=font, fill=255, anchor="la")
        y += round(size * 1.35)
    image.paste(Image.new("RGB", layer.size, ink), (left, top), layer)


def _plate(draw: ImageDraw.ImageDraw, rng: np.random.Generator, box: tuple[int, int, int, int]) -> None:
    """An engraving-like plate: a toned ground, hatching and shapes, filling ``box``."""
    left, top, right, bottom = box
    ground = tuple(int(v) for v in rng.integers(90, 170, 3))
    draw.rectangle(box, fill=ground)
    step = int(rng.integers(5, 11))
    for x in range(left - (bottom - top), right, step):
        draw.line((x, bottom, x + (bottom - top), top), fill=(30, 25, 20), width=1)
    for _ in range(25):
        x0, y0 = int(rng.integers(left, right)), int(rng.integers(top, bottom))
        r = int(rng.integers(20, 200))
        colour = tuple(int(v) for v in rng.integers(20, 200, 3))
        draw.ellipse((x0 - r, y0 - r, x0 + r, y0 + r), fill=colour, outline=(15, 10, 5), width=3)


def page(kind: str, seed: int) -> Image.Image:
    """One generated page of ``kind`` at display size (longest side 2000 px)."""
    rng = np.random.default_rng([seed, KINDS.index(kind)])
    if kind == "spread":
        width, height = 2000, int(rng.integers(1300, 1500))
    elif kind == "plate":
        width, height = int(rng.integers(700, 1500)), 2000
    else:
        width, height = int(rng.integers(1250, 1500)), 2000
    img = _paper(rng, width, height)
    draw = ImageDraw.Draw(img)
    size = int(rng.integers(24, 36))
    if kind == "full":  # text from the head to the foot and from edge to edge
        _text_block(img, rng, (-int(rng.integers(0, 30)), -int(rng.integers(0, 10)), width, height), size)
    elif kind == "narrow":
        m = [int(rng.integers(6, 24)) for _ in range(4)]
        _text_block(img, rng, (m[0], m[1], width - m[2], height - m[3] - size), size)
    elif kind == "spread":
        gutter = width // 2
        _text_block(img, rng, (0, 0, gutter - 30, height), size)
        _text_block(img, rng, (gutter + 30, 0, width, height), size)
        draw.line((gutter, 0, gutter, height), fill=(120, 110, 100), width=6)
    elif kind == "rtl":
        _text_block(img, rng, (0, int(rng.integers(0, 40)), width, height), size, rtl=True)
    elif kind == "plate":  # a tall plate bleeding off every edge, maybe a caption band inside it
        _plate(draw, rng, (0, 0, width, height))
    elif kind == "marginalia":  # a text block, notes in both side margins, a catchword and a page number
        m = int(width * 0.16)
        _text_block(img, rng, (m, 120, width - m, height - 120), size)
        for x0, x1 in ((8, m - 20), (width - m + 20, width - 8)):
            for _ in range(int(rng.integers(4, 9))):
                y0 = int(rng.integers(100, height - 200))
                _text_block(img, rng, (x0, y0, x1, y0 + 90), 16, ink=(110, 60, 40))
        draw.text((width - m, height - 60), _line(rng, 1), font=ImageFont.truetype(_SERIF, size), fill=(40, 28, 20))
        draw.text((width // 2, 40), str(int(rng.integers(1, 400))), font=ImageFont.truetype(_SERIF, size), fill=0)
    else:  # ordinary: generous margins, sometimes a plate in the block
        mx, my = int(width * rng.uniform(0.1, 0.15)), int(height * rng.uniform(0.08, 0.12))
        _text_block(img, rng, (mx, my, width - mx, height - my), size)
        if rng.random() < 0.5:
            _plate(draw, rng, (mx, my, width - mx, my + int(height * 0.35)))
    return img


def pages(n: int, seed: int) -> Iterator[tuple[str, Image.Image]]:
    """``n`` pages, the kinds in turn."""
    for i in range(n):
        kind = KINDS[i % len(KINDS)]
        yield kind, page(kind, seed * 100_000 + i)
