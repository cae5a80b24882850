"""Awkward test images made in memory: CMYK, 16-bit, palette with alpha, EXIF-rotated, ICC-tagged, broken, bombs."""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Mapping

import numpy as np
from PIL import Image, ImageDraw

__all__ = [
    "bomb_png",
    "cmyk_jpeg",
    "encode",
    "exif_rotated_jpeg",
    "garbage",
    "gray16_tiff",
    "icc_swapped_jpeg",
    "page_image",
    "palette_alpha_png",
    "rgb16_png",
    "rgba_png",
    "swapped_rgb_profile",
    "truncated_jpeg",
    "woodcut",
]

Box = tuple[float, float, float, float]
Colour = tuple[int, int, int]
PARCHMENT = (236, 224, 196)
INK = (40, 30, 25)


def encode(img: Image.Image, fmt: str = "JPEG", **options: object) -> bytes:
    out = io.BytesIO()
    img.save(out, fmt, **options)
    return out.getvalue()


def page_image(width: int, height: int, seed: int = 0, boxes: Mapping[Box, Colour] | None = None) -> Image.Image:
    """A generated (not scanned) page: parchment with noise, lines of text, and solid boxes at 0-1 ``boxes``."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    shade = (18 * np.sin(x / max(width, 1) * 3.1) * np.cos(y / max(height, 1) * 2.3)).astype(np.int16)
    pixels = np.array(PARCHMENT, dtype=np.int16) + shade[..., None] + rng.integers(-9, 10, (height, width, 1))
    img = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(img)
    step = max(12, height // 40)
    for row, top in enumerate(range(step, height - step, step)):
        words = " ".join(("incipit liber", "de arte moriendi", "capitulum", "folio") * 8)
        draw.text((width // 20, top), f"{row:03d} {words}", fill=INK, font_size=max(8, step * 2 // 3))
    for (bx, by, bw, bh), colour in (boxes or {}).items():
        draw.rectangle(
            (round(bx * width), round(by * height), round((bx + bw) * width) - 1, round((by + bh) * height) - 1),
            fill=colour,
        )
    return img


def woodcut(size: tuple[int, int], seed: int) -> Image.Image:
    """A generated picture standing in for an illustration: ink shapes on parchment, different for each seed."""
    rng = np.random.default_rng(seed)
    img = Image.new("RGB", size, PARCHMENT)
    draw = ImageDraw.Draw(img)
    width, height = size
    for _ in range(12):
        x0, x1 = sorted(rng.integers(0, width, 2).tolist())
        y0, y1 = sorted(rng.integers(0, height, 2).tolist())
        shade = tuple(int(v) for v in rng.integers(20, 160, 3))
        draw.ellipse((x0, y0, x1 + 2, y1 + 2), outline=INK, fill=shade, width=max(1, width // 150))
    return img


def cmyk_jpeg(size: tuple[int, int] = (700, 500)) -> bytes:
    """A CMYK JPEG (Pillow writes the Adobe marker, so it is stored inverted): left half red, right half blue."""
    img = Image.new("CMYK", size, (0, 255, 255, 0))
    img.paste((255, 255, 0, 0), (size[0] // 2, 0, size[0], size[1]))
    return encode(img, quality=95)


def rgb16_png(size: tuple[int, int] = (64, 48), value: tuple[int, int, int] = (65535, 32896, 0)) -> bytes:
    """A 16-bit-per-channel RGB PNG of one colour, written by hand (Pillow cannot write 16-bit RGB)."""
    width, height = size
    row = b"\x00" + struct.pack(">HHH", *value) * width
    return _png(width, height, 16, 2, zlib.compress(row * height))


def gray16_tiff(size: tuple[int, int] = (64, 48), value: int = 32768) -> bytes:
    """A 16-bit grayscale TIFF (mode I;16) of one level."""
    return encode(Image.fromarray(np.full(size[::-1], value, dtype=np.uint16)), "TIFF")


def palette_alpha_png(size: tuple[int, int] = (80, 60)) -> bytes:
    """A palette PNG whose index 0 is fully transparent (left half) and index 1 opaque green (right half)."""
    img = Image.new("P", size, 0)
    img.putpalette([0, 0, 0, 0, 200, 0] + [0] * 762)
    img.paste(1, (size[0] // 2, 0, size[0], size[1]))
    return encode(img, "PNG", transparency=0)


def rgba_png(size: tuple[int, int] = (80, 60)) -> bytes:
    """An RGBA PNG of blue at half opacity: flattened onto white it is (127, 127, 255)."""
    return encode(Image.new("RGBA", size, (0, 0, 255, 128)), "PNG")


def exif_rotated_jpeg(size: tuple[int, int] = (800, 400)) -> bytes:
    """A JPEG stored ``size`` wide with EXIF orientation 6 and a red block at its stored top-left corner.

    Shown upright it is rotated 90 degrees clockwise, so the red block appears at the top-right.
    """
    img = Image.new("RGB", size, (255, 255, 255))
    img.paste((255, 0, 0), (0, 0, size[0] // 5, size[1] // 5))
    exif = Image.Exif()
    exif[0x0112] = 6
    return encode(img, quality=95, exif=exif.tobytes())


def _s15(value: float) -> bytes:
    return struct.pack(">i", round(value * 65536))


def _xyz(v: tuple[float, float, float]) -> bytes:
    return b"XYZ \0\0\0\0" + b"".join(_s15(c) for c in v)


def swapped_rgb_profile() -> bytes:
    """An ICC v2 RGB profile with sRGB's red and blue primaries swapped, so conversion to sRGB swaps red and blue."""
    name = b"swapped-primaries test RGB\0"
    tags = {
        b"desc": b"desc\0\0\0\0" + struct.pack(">I", len(name)) + name + b"\0" * 8 + b"\0\0\0" + b"\0" * 67,
        b"wtpt": _xyz((0.9642, 1.0, 0.8249)),
        b"rXYZ": _xyz((0.1431, 0.0606, 0.7141)),  # sRGB's blue primary (D50)
        b"gXYZ": _xyz((0.3851, 0.7169, 0.0971)),
        b"bXYZ": _xyz((0.4361, 0.2225, 0.0139)),  # sRGB's red primary (D50)
        b"rTRC": b"curv\0\0\0\0" + struct.pack(">IH", 1, 0x0233),
        b"cprt": b"text\0\0\0\0generated for tests\0",
    }
    tags[b"gTRC"] = tags[b"bTRC"] = tags[b"rTRC"]
    return icc_profile(b"RGB ", tags)


def icc_profile(colour_space: bytes, tags: dict[bytes, bytes]) -> bytes:
    """An ICC v2 display profile of ``colour_space`` (b"RGB ", b"GRAY") holding ``tags`` (signature -> data)."""
    table_end = 128 + 4 + 12 * len(tags)
    table, body = b"", b""
    for sig, data in tags.items():
        data += b"\0" * (-len(data) % 4)
        table += sig + struct.pack(">II", table_end + len(body), len(data))
        body += data
    total = table_end + len(body)
    header = struct.pack(">I4sI4s4s4s", total, b"\0\0\0\0", 0x02100000, b"mntr", colour_space, b"XYZ ")
    header += b"\0" * 12 + b"acsp" + b"\0" * 24 + struct.pack(">I", 0) + _s15(0.9642) + _s15(1.0) + _s15(0.8249)
    header += b"\0" * (128 - len(header))
    return header + struct.pack(">I", len(tags)) + table + body


def icc_swapped_jpeg(size: tuple[int, int] = (640, 480)) -> bytes:
    """A pure-red RGB JPEG tagged with ``swapped_rgb_profile``: in sRGB it must come out blue."""
    return encode(Image.new("RGB", size, (255, 0, 0)), quality=95, icc_profile=swapped_rgb_profile())


def truncated_jpeg() -> bytes:
    """A JPEG cut off in the middle of its entropy-coded data."""
    data = encode(page_image(400, 300))
    return data[: len(data) // 2]


def garbage() -> bytes:
    """Bytes that are no image format at all."""
    return bytes(np.random.default_rng(7).integers(0, 256, 4096, dtype=np.uint8))


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png(width: int, height: int, depth: int, colour_type: int, idat: bytes) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, depth, colour_type, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def bomb_png(width: int = 30_000, height: int = 30_000) -> bytes:
    """A tiny 1-bit PNG whose header claims ``width`` x ``height`` pixels (its data covers only a few rows)."""
    return _png(width, height, 1, 0, zlib.compress(b"\x00" * (4 * ((width + 7) // 8 + 1))))
