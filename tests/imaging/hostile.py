"""Hostile masters made in memory, each with the outcome ingest owes it.

Lying headers in every format (a header that declares more pixels than the data holds), cuts, bombs of every shape,
EXIF/TIFF orientations in every format that carries them, ICC profiles on every mode, extreme aspect ratios, MPO.
Every case is a ``Case``: the bytes, and either the oriented size it must be accepted at or the refusal reason.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from PIL import Image

from tests.imaging.awkward import _chunk, _png, encode, page_image

__all__ = ["Case", "cases", "lying", "lying_header", "mpo", "noisy", "oriented", "patch_size"]

FORMATS = ("JPEG", "PNG", "TIFF", "WEBP", "GIF", "BMP")


@dataclass(frozen=True)
class Case:
    """One hostile master: ``size`` (oriented width, height) when it must be accepted, else the refusal ``reason``."""

    name: str
    data: bytes
    size: tuple[int, int] | None = None
    reason: str | None = None
    fmt: str = ""

    def __post_init__(self) -> None:
        assert (self.size is None) != (self.reason is None), self.name


def noisy(size: tuple[int, int], seed: int = 0, mode: str = "RGB") -> Image.Image:
    """A generated page with enough texture that no codec can squeeze it to nothing."""
    img = page_image(*size, seed=seed)
    return img if mode == "RGB" else img.convert(mode)


def _save(img: Image.Image, fmt: str) -> bytes:
    options: dict[str, object] = {"JPEG": {"quality": 80}, "WEBP": {"quality": 80}, "TIFF": {}}.get(fmt, {})
    if fmt == "GIF":
        img = img.convert("P")
    return encode(img, fmt, **options)


def patch_size(data: bytes, fmt: str, width: int, height: int) -> bytes:
    """``data`` with its header's pixel size replaced by ``width`` x ``height`` (the pixel data left as it is)."""
    out = bytearray(data)
    if fmt == "JPEG":
        pos = 2
        while pos < len(out):
            marker, length = out[pos + 1], struct.unpack(">H", out[pos + 2 : pos + 4])[0]
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                struct.pack_into(">HH", out, pos + 5, height, width)
                return bytes(out)
            pos += 2 + length
        raise AssertionError("no SOF marker")
    if fmt == "PNG":
        ihdr = bytearray(out[16:29])
        struct.pack_into(">II", ihdr, 0, width, height)
        return bytes(out[:8]) + _chunk(b"IHDR", bytes(ihdr)) + bytes(out[33:])
    if fmt == "GIF":  # the logical screen and the first frame's descriptor both
        struct.pack_into("<HH", out, 6, width, height)
        frame = out.index(b"\x2c", 13 + (3 << ((out[10] & 7) + 1) if out[10] & 0x80 else 13))
        struct.pack_into("<HH", out, frame + 5, width, height)
        return bytes(out)
    if fmt == "BMP":
        struct.pack_into("<ii", out, 18, width, height)
        return bytes(out)
    if fmt == "WEBP":  # a VP8X canvas larger than the bitstream inside it
        body = bytes(out[12:])
        vp8x = bytes([0, 0, 0, 0]) + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
        chunk = b"VP8X" + struct.pack("<I", 10) + vp8x
        riff = chunk + body
        return b"RIFF" + struct.pack("<I", 4 + len(riff)) + b"WEBP" + riff
    if fmt == "TIFF":
        return _patch_tiff(bytes(out), width, height)
    raise ValueError(fmt)


def _patch_tiff(data: bytes, width: int, height: int) -> bytes:
    out = bytearray(data)
    order = "<" if data[:2] == b"II" else ">"
    ifd = struct.unpack(order + "I", data[4:8])[0]
    count = struct.unpack(order + "H", data[ifd : ifd + 2])[0]
    for i in range(count):
        entry = ifd + 2 + 12 * i
        tag, kind = struct.unpack(order + "HH", data[entry : entry + 4])
        if tag in (256, 257, 278):  # ImageWidth, ImageLength, RowsPerStrip
            value = width if tag == 256 else height
            if kind == 3:
                struct.pack_into(order + "H", out, entry + 8, min(value, 65535))
            else:
                struct.pack_into(order + "I", out, entry + 8, value)
    return bytes(out)


def lying_header(fmt: str, data_size: tuple[int, int], claimed: tuple[int, int]) -> bytes:
    """A ``fmt`` file holding ``data_size`` pixels whose header claims ``claimed``."""
    return patch_size(_save(noisy(data_size), fmt), fmt, *claimed)


def lying(fmt: str, max_pixels: int = 250_000_000) -> Iterator[Case]:
    """Every way ``fmt`` can lie about its size: a lot (the reported 15000x15000 JPEG), a little, and cut short.

    libwebp refuses a canvas its bitstream does not fill as damaged, so WebP's lies come out ``corrupt``.
    """
    reason = "corrupt" if fmt == "WEBP" else "truncated"
    big = min(15000, math.isqrt(max_pixels * 95 // 100))  # as large as the limit lets a header claim
    for claimed in ((big, big), (1600, 1200)):
        name = f"{fmt} claims {claimed[0]}x{claimed[1]}, holds 800x600"
        yield Case(name, lying_header(fmt, (800, 600), claimed), reason=reason, fmt=fmt)
    whole = _save(noisy((800, 600), seed=3), fmt)
    yield Case(f"{fmt} cut at 60%", whole[: len(whole) * 6 // 10], reason=reason, fmt=fmt)


def oriented(fmt: str, orientation: int, size: tuple[int, int] = (800, 600)) -> bytes:
    """A ``fmt`` master stored ``size`` with EXIF (TIFF: the baseline tag) orientation ``orientation``."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    img = noisy(size, seed=orientation)
    img.paste((255, 0, 0), (0, 0, size[0] // 5, size[1] // 5))
    return encode(img, fmt, exif=exif.tobytes() if fmt != "TIFF" else exif)


def deflate_bomb_png(width: int, height: int) -> bytes:
    """An honest 1-bit PNG of ``width`` x ``height`` all-white pixels: deflate shrinks it about a thousand times."""
    row = b"\x00" + b"\xff" * ((width + 7) // 8)
    compressor = zlib.compressobj(9)
    idat = b"".join(compressor.compress(row) for _ in range(height)) + compressor.flush()
    return _png(width, height, 1, 0, idat)


def palette_bomb_png(width: int, height: int) -> bytes:
    """An honest 8-bit palette PNG of one colour: tiny file, large pixel count."""
    row = b"\x00" + b"\x01" * width
    compressor = zlib.compressobj(9)
    idat = b"".join(compressor.compress(row) for _ in range(height)) + compressor.flush()
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 3, 0, 0, 0)
    plte = bytes(range(256)) * 3
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", ihdr)
        + _chunk(b"PLTE", plte)
        + _chunk(b"IDAT", idat)
        + _chunk(b"IEND", b"")
    )


def mpo(size: tuple[int, int] = (800, 600)) -> bytes:
    """A two-frame MPO (as phones write): a JPEG whose first frame is the picture."""
    first, second = noisy(size, seed=11), noisy(size, seed=12)
    return encode(first, "MPO", save_all=True, append_images=[second], quality=85)


def cases(max_pixels: int) -> Iterator[Case]:
    """Every hostile case with its expected outcome under a pixel limit of ``max_pixels`` (at most 60 Mpx here)."""
    for fmt in FORMATS:
        yield from lying(fmt, max_pixels)
    for fmt in ("JPEG", "PNG", "WEBP", "TIFF"):
        for orientation in range(1, 9):
            size = (600, 800) if orientation >= 5 else (800, 600)
            yield Case(f"{fmt} orientation {orientation}", oriented(fmt, orientation), size=size, fmt=fmt)
    yield Case("MPO from a phone", mpo(), size=(800, 600), fmt="MPO")
    for size in ((20000, 300), (300, 20000), (6000, 40)):
        plate = Image.merge("RGB", [Image.linear_gradient("L").resize(size)] * 3)
        yield Case(f"plate {size[0]}x{size[1]}", encode(plate, "PNG"), size=size, fmt="PNG")
    side = int((max_pixels * 1.05) ** 0.5) + 1
    yield Case("1-bit deflate bomb", deflate_bomb_png(side, side), reason="too_large", fmt="PNG")
    yield Case("palette bomb", palette_bomb_png(side, side), reason="too_large", fmt="PNG")
    yield Case("30000x30000 header", _png(30_000, 30_000, 1, 0, zlib.compress(b"\0" * 8)), reason="too_large")
    yield Case("70000x10 header", _png(70_000, 10, 8, 0, zlib.compress(b"\0" * 70_001)), reason="too_large")
    yield Case("under-limit deflate bomb", deflate_bomb_png(4000, 3000), size=(4000, 3000), fmt="PNG")
    yield Case("garbage", bytes(range(256)) * 16, reason="unsupported_format")
    yield Case("empty file", b"", reason="unsupported_format")
