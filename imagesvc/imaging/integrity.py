"""Does a master's data cover the size its header declares? Cheap checks made before any pixel buffer is allocated.

Decoders pad what is missing (libjpeg fills absent blocks with grey and says so only in a warning Pillow drops), so a
22 KiB file claiming 15000x15000 would otherwise be published as a grey page after allocating gigabytes. Each check
here reads the container structure only and applies a lower bound on the bytes a codec needs per pixel:
- JPEG (Huffman): every 8x8 block costs at least one bit, so the entropy-coded data holds at least blocks/8 bytes.
- PNG: the zlib stream is inflated in bounded chunks and must yield exactly the rows the header declares.
- GIF: the first frame must cover the logical screen, and LZW yields at most ~2,731 pixels a byte past its warm-up.
- BMP: uncompressed rows must all be present; RLE yields at most 255 pixels per two bytes.
- TIFF: every strip or tile must lie inside the file, and the strips must cover every row.
WebP needs nothing here: libwebp refuses a canvas its bitstream does not fill. One-scan (baseline) JPEGs are also
checked exactly while decoding (``tiers.decode``); a progressive or multi-scan JPEG cut short but above the one-bit
bound still decodes with grey padding (libjpeg buffers all its scans first): a known gap.
"""

from __future__ import annotations

import math
import struct
import zlib

from PIL import Image

from imagesvc.imaging.refusals import refused

__all__ = ["check_covered", "first_scan", "jpeg_scans"]

_JPEG_HUFFMAN_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7}
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
_INFLATE_CHUNK = 1 << 22
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


def _short(what: str, detail: str):
    return refused("truncated", f"the data ends before the image its header declares ({what}: {detail})")


def first_scan(data: bytes) -> int:
    """Offset of a JPEG's first SOS marker, found by walking the marker segments (an APP segment may hold a whole
    thumbnail JPEG with its own SOS and EOI); -1 when there is none."""
    pos = 2
    while pos + 4 <= len(data) and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker == 0xDA:
            return pos
        pos += 2 + struct.unpack(">H", data[pos + 2 : pos + 4])[0]
    return -1


def jpeg_scans(frame: bytes) -> int:
    """How many scans a JPEG frame holds: 0xFF 0xDA never occurs in entropy-coded data or the tables between scans."""
    sos = first_scan(frame)
    return frame.count(b"\xff\xda", sos) if sos >= 0 else 0


def _check_jpeg(data: bytes) -> None:
    pos, sof, blocks = 2, None, 0
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            raise refused("corrupt", f"malformed JPEG: expected a marker at byte {pos}")
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        length = struct.unpack(">H", data[pos + 2 : pos + 4])[0]
        if marker == 0xDA:
            break
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            sof = marker
            height, width, n = struct.unpack(">HHB", data[pos + 5 : pos + 10])
            comps = [data[pos + 10 + 3 * i + 1] for i in range(n)]
            hmax = max(c >> 4 for c in comps) or 1
            vmax = max(c & 15 for c in comps) or 1
            for c in comps:
                cols = math.ceil(math.ceil(width * (c >> 4) / hmax) / 8)
                rows = math.ceil(math.ceil(height * (c & 15) / vmax) / 8)
                blocks += cols * rows
        pos += 2 + length
    if sof is None or pos + 4 > len(data):
        raise _short("JPEG", "no image data after the header")
    entropy = len(data) - pos
    if sof in _JPEG_HUFFMAN_SOF and entropy * 8 < blocks:
        raise _short("JPEG", f"{entropy:,} bytes of image data cannot hold {blocks:,} blocks of 8x8 pixels")


def _check_png(data: bytes, img: Image.Image) -> None:
    width, height = img.size
    depth, colour, interlace = data[24], data[25], data[28]
    bits = depth * _PNG_CHANNELS.get(colour, 4)
    passes = _ADAM7 if interlace else ((0, 0, 1, 1),)
    expected = 0
    for x0, y0, dx, dy in passes:
        w, h = max(0, (width - x0 + dx - 1) // dx), max(0, (height - y0 + dy - 1) // dy)
        expected += h * (1 + (w * bits + 7) // 8) if w else 0
    inflater, produced, pos = zlib.decompressobj(), 0, 8
    while pos + 8 <= len(data) and produced < expected:
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunk = data[pos + 8 : pos + 8 + length]
        if kind == b"IDAT":
            while chunk and produced < expected:
                produced += len(inflater.decompress(chunk, _INFLATE_CHUNK))
                chunk = inflater.unconsumed_tail
        elif kind == b"IEND":
            break
        pos += 12 + length
    if produced < expected:
        raise _short("PNG", f"the compressed rows give {produced:,} of the {expected:,} bytes declared")


def _check_gif(data: bytes, img: Image.Image) -> None:
    width, height = img.size
    flags = data[10]
    pos = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
    while pos < len(data) and data[pos] == 0x21:  # extension blocks
        pos += 2
        while pos < len(data) and data[pos]:
            pos += data[pos] + 1
        pos += 1
    if pos + 10 > len(data) or data[pos] != 0x2C:
        raise _short("GIF", "no image data after the header")
    left, top, w, h = struct.unpack("<HHHH", data[pos + 1 : pos + 9])
    if (left, top) != (0, 0) or (w, h) != (width, height):
        raise _short("GIF", f"the first frame covers {w}x{h} at ({left}, {top}) of a {width}x{height} screen")
    if width * height > 8_400_000 + 2_731 * (len(data) - pos):
        raise _short("GIF", f"{len(data) - pos:,} bytes of LZW data cannot hold {width * height:,} pixels")


def _check_bmp(data: bytes, img: Image.Image) -> None:
    width, height = img.size
    offset, header = struct.unpack("<I", data[10:14])[0], struct.unpack("<I", data[14:18])[0]
    if header >= 40:
        bits, compression = struct.unpack("<HI", data[28:34])
    else:  # OS/2 core header: no compression field
        bits, compression = struct.unpack("<H", data[24:26])[0], 0
    available = len(data) - offset
    if compression in (0, 3, 6):  # raw rows (bitfields too)
        stride = ((width * bits + 31) // 32) * 4
        if available < stride * height:
            raise _short("BMP", f"{available:,} bytes hold fewer than the {height:,} rows declared")
    elif compression in (1, 2) and width * height > 128 * available:
        raise _short("BMP", f"{available:,} bytes of RLE data cannot hold {width * height:,} pixels")


def _check_tiff(data: bytes, img: Image.Image) -> None:
    tags = getattr(img, "tag_v2", {})
    offsets, counts = tags.get(273) or tags.get(324), tags.get(279) or tags.get(325)
    if not offsets or not counts:
        return
    if isinstance(offsets, int):
        offsets, counts = (offsets,), (counts,)
    for off, count in zip(offsets, counts, strict=False):
        if off + count > len(data):
            raise _short("TIFF", f"a strip or tile ends at byte {off + count:,} of a {len(data):,}-byte file")
    if tags.get(259, 1) == 1:  # uncompressed: the strips hold every sample
        bits = tags.get(258, (8,))
        per_pixel = sum(bits) if isinstance(bits, tuple) else bits * tags.get(277, 1)
        needed = img.size[1] * ((img.size[0] * per_pixel + 7) // 8)
        if sum(counts) < needed:
            raise _short("TIFF", f"{sum(counts):,} bytes of strips hold less than the {needed:,} declared")
    length = tags.get(257, img.size[1])
    if 273 in tags:
        per_strip = tags.get(278, length)
        planes = tags.get(284, 1)
        if len(offsets) // max(1, planes if planes == 2 else 1) * per_strip < length:
            raise _short("TIFF", f"{len(offsets)} strips of {per_strip} rows cannot hold {length:,} rows")


def check_covered(data: bytes, img: Image.Image) -> None:
    """Refuse (reason ``truncated``) a master whose data cannot fill the size its header ``img`` declares."""
    fmt = img.format
    try:
        if fmt in ("JPEG", "MPO"):
            _check_jpeg(data)
        elif fmt == "PNG":
            _check_png(data, img)
        elif fmt == "GIF":
            _check_gif(data, img)
        elif fmt == "BMP":
            _check_bmp(data, img)
        elif fmt == "TIFF":
            _check_tiff(data, img)
    except (struct.error, IndexError, zlib.error) as exc:
        raise refused("corrupt", f"malformed {fmt} structure ({type(exc).__name__})") from exc
