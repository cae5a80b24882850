"""Per-request provenance in image metadata: build a small XMP packet and splice it into a JPEG without re-encoding."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import NamedTuple
from xml.sax.saxutils import escape

from imagesvc.errors import ImageRejected, InvalidRequest

__all__ = [
    "NS_IMAGESVC",
    "XMP_HEADER",
    "build_xmp",
    "etag_with_xmp",
    "read_xmp",
    "signable_pieces",
    "splice_xmp",
    "strip_c2pa",
]

XMP_HEADER = b"http://ns.adobe.com/xap/1.0/\x00"
_XMP_EXTENSION = b"http://ns.adobe.com/xmp/extension/\x00"
_EXIF_HEADER = b"Exif\x00\x00"
NS_IMAGESVC = "urn:imagesvc:xmp:1.0/"
_APP0, _APP1, _APP11, _SOS, _EOI = 0xE0, 0xE1, 0xEB, 0xDA, 0xD9
_STANDALONE = {0x01, *range(0xD0, 0xD8)}
_MAX_PAYLOAD = 0xFFFF - 2  # the length field counts itself
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\Z")
# Characters XML 1.0 forbids outright; they would make the packet unreadable.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_NAMED = {"rights", "source", "web_statement"}


class _Segment(NamedTuple):
    marker: int
    start: int  # offset of the 0xFF of the marker
    end: int  # offset just past the segment
    payload: bytes


def _segments(jpeg: bytes) -> tuple[list[_Segment], int]:
    """The marker segments before the first SOS, and the offset of that SOS marker."""
    if jpeg[:2] != b"\xff\xd8":
        raise ImageRejected("not a JPEG: the data does not start with the SOI marker")
    segments: list[_Segment] = []
    pos = 2
    while True:
        if pos >= len(jpeg) or jpeg[pos] != 0xFF:
            raise ImageRejected(f"malformed JPEG: expected a marker at byte {pos}")
        start = pos
        while pos < len(jpeg) and jpeg[pos] == 0xFF:  # markers may be preceded by fill bytes
            pos += 1
        if pos >= len(jpeg):
            raise ImageRejected("malformed JPEG: truncated before the image data")
        marker = jpeg[pos]
        pos += 1
        if marker == _SOS:
            return segments, start
        if marker == _EOI:
            raise ImageRejected("malformed JPEG: end of image before any image data")
        if marker in _STANDALONE:
            continue
        if pos + 2 > len(jpeg):
            raise ImageRejected("malformed JPEG: truncated segment header")
        length = int.from_bytes(jpeg[pos : pos + 2], "big")
        end = pos + length
        if length < 2 or end > len(jpeg):
            raise ImageRejected(f"malformed JPEG: segment 0x{marker:02X} at byte {start} overruns the data")
        segments.append(_Segment(marker, start, end, jpeg[pos + 2 : end]))
        pos = end


def _is_xmp(seg: _Segment) -> bool:
    return seg.marker == _APP1 and seg.payload.startswith((XMP_HEADER, _XMP_EXTENSION))


def _xmp_segment(xmp_xml: str) -> bytes:
    packet = xmp_xml.encode("utf-8")
    payload = XMP_HEADER + packet
    if len(payload) > _MAX_PAYLOAD:
        raise InvalidRequest(f"XMP packet of {len(packet):,} bytes exceeds one APP1 segment (at most 65,504 bytes)")
    return b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload


def _pieces(jpeg: bytes, xmp_xml: str | None, *, drop_c2pa: bool) -> tuple[list[bytes | memoryview], int]:
    """``jpeg`` cut into pieces (views, not copies) that join into the file with its XMP set to ``xmp_xml`` (kept as
    it is when None) and, if ``drop_c2pa``, without its C2PA manifest; and how many pieces precede the new XMP
    segment: the start-of-image marker and the leading APP0 (JFIF) and APP1 (Exif) segments, which readers expect
    first."""
    segment = None if xmp_xml is None else _xmp_segment(xmp_xml)
    segments, sos = _segments(jpeg)
    kept = [
        seg for seg in segments if not (segment is not None and _is_xmp(seg)) and not (drop_c2pa and _is_jumbf(seg))
    ]
    lead = 0
    while lead < len(kept) and (
        kept[lead].marker == _APP0 or (kept[lead].marker == _APP1 and kept[lead].payload.startswith(_EXIF_HEADER))
    ):
        lead += 1
    view = memoryview(jpeg)
    head = [view[seg.start : seg.end] for seg in kept]
    new = [] if segment is None else [segment]
    return [b"\xff\xd8", *head[:lead], *new, *head[lead:], view[sos:]], 1 + lead


def splice_xmp(jpeg: bytes, xmp_xml: str, *, drop_c2pa: bool = False) -> bytes:
    """Return ``jpeg`` with its XMP replaced by (or set to) ``xmp_xml``; the image data is copied untouched.

    The new APP1 segment goes right after the leading APP0 (JFIF) and APP1 (Exif) segments; any old standard or
    extended XMP segment is dropped, and with ``drop_c2pa`` any C2PA manifest (which the new note would break).
    Raises ``InvalidRequest`` if the packet does not fit one segment (65,504 bytes of XML) and ``ImageRejected`` if
    ``jpeg`` is not a well-formed JPEG.
    """
    return b"".join(_pieces(jpeg, xmp_xml, drop_c2pa=drop_c2pa)[0])


def signable_pieces(jpeg: bytes, xmp_xml: str | None = None) -> tuple[list[bytes | memoryview], int]:
    """The pieces that join into ``jpeg`` ready to sign (its C2PA manifest dropped and, when ``xmp_xml`` is given,
    its XMP set to it: see ``splice_xmp``), and the index among them where a C2PA manifest goes: right after the
    leading APP0 and Exif segments. The image data is a view of ``jpeg``, not a copy.
    """
    return _pieces(jpeg, xmp_xml, drop_c2pa=True)


def _is_jumbf(seg: _Segment) -> bool:
    # C2PA manifest stores travel in APP11 segments holding JUMBF boxes (the "JP" common identifier).
    return seg.marker == _APP11 and seg.payload.startswith(b"JP")


def strip_c2pa(jpeg: bytes) -> bytes:
    """``jpeg`` without its C2PA manifest store (APP11 JUMBF segments); the same object when it has none."""
    segments, sos = _segments(jpeg)
    if not any(_is_jumbf(seg) for seg in segments):
        return jpeg
    head = [jpeg[seg.start : seg.end] for seg in segments if not _is_jumbf(seg)]
    return b"".join([b"\xff\xd8", *head, jpeg[sos:]])


def read_xmp(jpeg: bytes) -> str | None:
    """The standard XMP packet of ``jpeg`` as text, or None when it has none; ``ImageRejected`` if not a JPEG."""
    segments, _ = _segments(jpeg)
    for seg in segments:
        if seg.marker == _APP1 and seg.payload.startswith(XMP_HEADER):
            return seg.payload[len(XMP_HEADER) :].decode("utf-8", errors="replace")
    return None


def _text(value: str) -> str:
    return escape(_XML_ILLEGAL.sub("", value))


def build_xmp(fields: Mapping[str, str]) -> str:
    """A minimal XMP packet from ``fields``, every value XML-escaped, in a stable order.

    ``rights`` becomes dc:rights, ``source`` dc:source and ``web_statement`` xmpRights:WebStatement; every other key
    (for example ``requester``, ``edition``) becomes a property in the ``NS_IMAGESVC`` namespace. Keys must be XML
    names (``InvalidRequest`` otherwise).
    """
    props: list[str] = []
    if "rights" in fields:
        props.append(
            f'<dc:rights><rdf:Alt><rdf:li xml:lang="x-default">{_text(fields["rights"])}</rdf:li></rdf:Alt></dc:rights>'
        )
    if "source" in fields:
        props.append(f"<dc:source>{_text(fields['source'])}</dc:source>")
    if "web_statement" in fields:
        props.append(f"<xmpRights:WebStatement>{_text(fields['web_statement'])}</xmpRights:WebStatement>")
    for key in sorted(set(fields) - _NAMED):
        if not _KEY.match(key):
            raise InvalidRequest(f"XMP field name {key!r} is not a valid XML name")
        props.append(f"<imagesvc:{key}>{_text(fields[key])}</imagesvc:{key}>")
    body = "\n    ".join(props)
    return (
        '<?xpacket begin="\ufeff" id="W5M0MpCehiHzreSzNTczkc9d"?>\n'
        '<x:xmpmeta xmlns:x="adobe:ns:meta/">\n'
        ' <rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">\n'
        '  <rdf:Description rdf:about=""\n'
        '    xmlns:dc="http://purl.org/dc/elements/1.1/"\n'
        '    xmlns:xmpRights="http://ns.adobe.com/xap/1.0/rights/"\n'
        f'    xmlns:imagesvc="{NS_IMAGESVC}">\n'
        f"    {body}\n"
        "  </rdf:Description>\n"
        " </rdf:RDF>\n"
        "</x:xmpmeta>\n"
        '<?xpacket end="r"?>'
    )


def etag_with_xmp(etag: str, xmp_xml: str | None) -> str:
    """The validator of stored bytes ``etag`` once ``xmp_xml`` is spliced in: the note names the key and the day, so
    the ETag changes with it (``/image`` and IIIF deliveries alike). ``etag`` itself when there is no note."""
    return f"{etag}-{hashlib.sha256(xmp_xml.encode()).hexdigest()[:12]}" if xmp_xml else etag
