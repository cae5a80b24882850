"""XMP splicing: the packet goes in (or is replaced) without touching a byte of the compressed image data."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from PIL import Image

from imagesvc.errors import ImageRejected, InvalidRequest
from imagesvc.imaging.xmp import NS_IMAGESVC, build_xmp, read_xmp, splice_xmp
from tests.imaging.awkward import encode, page_image
from tests.imaging.helpers import scan_digest

FIELDS = {
    "rights": "Public domain <scan> & metadata CC0",
    "source": "https://books.example.org/b/ars-moriendi-1475/p/17",
    "web_statement": "https://books.example.org/licence",
    "requester": 'key "k_123" \x07',
    "edition": "2025-06",
}
DC = "{http://purl.org/dc/elements/1.1/}"


def decoded(jpeg: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB"))


@pytest.mark.parametrize("exif", [False, True])
def test_splice_keeps_entropy_data_and_pixels_identical(exif: bool) -> None:
    options = {"exif": Image.Exif().tobytes()} if exif else {}
    original = encode(page_image(400, 300), quality=85, **options)
    spliced = splice_xmp(original, build_xmp(FIELDS))
    assert scan_digest(spliced) == scan_digest(original)
    assert np.array_equal(decoded(spliced), decoded(original))
    assert spliced.startswith(b"\xff\xd8\xff\xe0")  # JFIF stays first
    if exif:
        assert spliced.index(b"Exif\x00\x00") < spliced.index(b"http://ns.adobe.com/xap/1.0/\x00")


def test_xmp_reads_back_as_valid_xml_with_escaped_values() -> None:
    jpeg = splice_xmp(encode(page_image(200, 150)), build_xmp(FIELDS))
    packet = read_xmp(jpeg)
    assert packet is not None
    root = ET.fromstring(packet[packet.index("<x:xmpmeta") : packet.index("</x:xmpmeta>") + 12])
    assert root.find(f".//{DC}rights//*[@{{http://www.w3.org/XML/1998/namespace}}lang]").text == FIELDS["rights"]
    assert root.find(f".//{DC}source").text == FIELDS["source"]
    assert root.find(f".//{{{NS_IMAGESVC}}}requester").text == 'key "k_123" '  # control character dropped
    # Pillow, an independent reader, finds the same packet
    assert "k_123" in Image.open(io.BytesIO(jpeg)).info["xmp"].decode()


def test_splicing_again_replaces_the_packet() -> None:
    once = splice_xmp(encode(page_image(200, 150)), build_xmp({"requester": "first"}))
    twice = splice_xmp(once, build_xmp({"requester": "second"}))
    assert twice.count(b"http://ns.adobe.com/xap/1.0/\x00") == 1
    assert "second" in (read_xmp(twice) or "") and "first" not in (read_xmp(twice) or "")


def test_read_xmp_is_none_without_a_packet() -> None:
    assert read_xmp(encode(page_image(100, 80))) is None


def test_oversized_packet_and_bad_keys_and_non_jpegs_are_refused() -> None:
    jpeg = encode(page_image(100, 80))
    with pytest.raises(InvalidRequest, match="65,504"):
        splice_xmp(jpeg, build_xmp({"note": "x" * 70_000}))
    with pytest.raises(InvalidRequest, match="not a valid XML name"):
        build_xmp({"bad key": "v"})
    with pytest.raises(ImageRejected, match="SOI"):
        splice_xmp(encode(page_image(100, 80), "PNG"), build_xmp(FIELDS))
    with pytest.raises(ImageRejected, match="malformed"):
        splice_xmp(jpeg[:40], build_xmp(FIELDS))
