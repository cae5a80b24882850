"""C2PA signing of page tiers: what gets signed, what a validator reads back, and the chains a validator refuses."""

from __future__ import annotations

import datetime as dt
import io
import os
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from PIL import Image

from imagesvc.errors import Unavailable
from imagesvc.imaging import MarkSpec, TierSpec
from imagesvc.imaging.renditions import render_page
from imagesvc.imaging.xmp import signable_pieces, splice_xmp, strip_c2pa
from imagesvc.provenance import PageSource, SigningPaths, box_hashed
from imagesvc.provenance.box_hashed import box_names
from imagesvc.provenance.credentials import check_chain, ensure_local_ca
from imagesvc.provenance.manifests import SOURCE_LABEL, public_manifest
from imagesvc.provenance.sign import read_credentials, sign_jpeg, sign_page
from tests.imaging.awkward import cmyk_jpeg, encode, exif_rotated_jpeg, icc_swapped_jpeg, page_image
from tests.imaging.helpers import scan_digest

MARK = MarkSpec("A Library", "https://library.example/book/b?page=3", "A Museum")
SOURCE = PageSource("A Museum", "A Herbal (1598)", "https://library.example/book/b?page=3", "A Library")
MASTER_SHA = "5e" * 32


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> SigningPaths:
    return ensure_local_ca(tmp_path_factory.mktemp("ca") / "c2pa", "A Library")


def test_marked_tiers_are_signed_and_read_back_trusted(ca: SigningPaths) -> None:
    page = render_page(encode(page_image(900, 1200)), TierSpec(), MARK, [(0.1, 0.1, 0.5, 0.5)])
    signed = sign_page(page, SOURCE, MASTER_SHA, ca)
    for tier, rendition in signed.public.items():
        found = read_credentials(rendition.data, ca.anchor)
        assert found.state == "Trusted", (tier, found.failures)
        assert found.manifest["ingredients"][0]["instance_id"] == f"urn:sha256:{MASTER_SHA}"
        assert found.assertion(SOURCE_LABEL)["edition"] == "A Herbal (1598)"
        assert scan_digest(rendition.data) == scan_digest(page.public[tier].data)  # pixels as rendered
        assert strip_c2pa(rendition.data) == page.public[tier].data
        assert rendition.sha256 == page.public[tier].sha256  # keys address the image, whatever the salts
    assert read_credentials(signed.illustrations[0].public["display"].data, ca.anchor).state == "Trusted"
    assert signed.clean == page.clean  # clean copies are never signed at ingest
    assert read_credentials(signed.clean["display"].data).state is None
    # Without the local root as anchor a validator still finds the file intact, from an issuer it does not know.
    assert read_credentials(signed.public["display"].data).state == "Valid"


def test_unmarked_small_pages_are_left_alone(ca: SigningPaths) -> None:
    page = render_page(encode(page_image(400, 300)), TierSpec(), MARK, [])
    assert sign_page(page, SOURCE, MASTER_SHA, ca).public == page.public


def test_local_ca_is_made_once_even_by_racing_processes(tmp_path: Path) -> None:
    with ThreadPoolExecutor(4) as pool:
        made = list(pool.map(lambda _: ensure_local_ca(tmp_path / "c2pa", "Lib"), range(4)))
    assert len({m.chain.read_bytes() for m in made}) == 1
    assert stat.S_IMODE(os.stat(made[0].key).st_mode) == 0o600
    assert check_chain(made[0]) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c2pa"]  # no staging folder left behind


def _leaf(*, eku: list[x509.ObjectIdentifier], self_signed: bool = False, aki: bool = True):
    root_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    name = lambda cn: x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])  # noqa: E731
    now = dt.datetime.now(dt.UTC)
    issuer, signing_key = (name("leaf"), key) if self_signed else (name("root"), root_key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name("leaf"))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(eku), critical=False)
    )
    if aki:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(signing_key.public_key()), critical=False
        )
    return builder.sign(signing_key, hashes.SHA256()), key


def _write(tmp_path: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> SigningPaths:
    pem = serialization.Encoding.PEM
    (tmp_path / "chain.pem").write_bytes(cert.public_bytes(pem))
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return SigningPaths(tmp_path / "chain.pem", tmp_path / "key.pem")


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"eku": [ExtendedKeyUsageOID.SERVER_AUTH]}, "emailProtection or documentSigning"),
        ({"eku": [ExtendedKeyUsageOID.EMAIL_PROTECTION], "self_signed": True}, "self-signed"),
        ({"eku": [ExtendedKeyUsageOID.EMAIL_PROTECTION], "aki": False}, "authorityKeyIdentifier"),
    ],
)
def test_chains_a_validator_refuses_are_named_and_refused(tmp_path: Path, kwargs: dict, problem: str) -> None:
    paths = _write(tmp_path, *_leaf(**kwargs))
    problems = check_chain(paths)
    assert any(problem in p for p in problems), problems
    with pytest.raises(Unavailable, match=r"Content Credentials failed|Cannot load"):
        sign_jpeg(encode(page_image(200, 150)), {"title": "t", "format": "image/jpeg"}, paths)


def test_a_key_that_is_not_the_leafs_is_named(tmp_path: Path, ca: SigningPaths) -> None:
    cert, _ = _leaf(eku=[ExtendedKeyUsageOID.EMAIL_PROTECTION])
    paths = _write(tmp_path, cert, ec.generate_private_key(ec.SECP256R1()))
    assert any("does not belong" in p for p in check_chain(paths))
    missing = SigningPaths(tmp_path / "absent.pem", tmp_path / "key.pem")
    assert any("cannot read" in p for p in check_chain(missing))
    with pytest.raises(Unavailable, match="Cannot load"):
        sign_jpeg(encode(page_image(200, 150)), {"title": "t", "format": "image/jpeg"}, missing)


PATHS = ["box-hashed", "data-hashed", "Builder.sign"]


def _use(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sign through ``path``: turn off the faster paths before it."""
    from imagesvc.provenance import box_hashed, data_hashed

    assert box_hashed.AVAILABLE and data_hashed.AVAILABLE, "c2pa-python's native library should have both functions"
    if path != "box-hashed":
        monkeypatch.setattr(box_hashed, "AVAILABLE", False)
    if path == "Builder.sign":
        monkeypatch.setattr(data_hashed, "AVAILABLE", False)


def test_every_signing_path_reads_back_alike(ca: SigningPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    """Box-hashed (what this host uses), data-hashed (its fallback) and c2pa-python's ``Builder.sign`` (where neither
    native function exists) give files that read back alike: Trusted, the same assertions, the same image bytes."""
    data = encode(page_image(600, 800))
    manifest = public_manifest(SOURCE, MASTER_SHA, "jpeg", "display")
    files = {}
    for path in PATHS:
        with monkeypatch.context() as patch:
            _use(path, patch)
            files[path] = sign_jpeg(data, manifest, ca)
    read = {}
    for path, signed in files.items():
        found = read_credentials(signed, ca.anchor)
        assert found.state == "Trusted", (path, found.failures)
        assert strip_c2pa(signed) == data, path
        actions = [(a["action"], a.get("description")) for a in found.assertion("c2pa.actions.v2")["actions"]]
        read[path] = (found.assertion(SOURCE_LABEL), actions)
    assert read["box-hashed"] == read["data-hashed"] == read["Builder.sign"]
    assert read["box-hashed"][0]["citation_url"] == SOURCE.citation_url


def _flip(data: bytes, at: int) -> bytes:
    out = bytearray(data)
    out[at] ^= 0x01
    return bytes(out)


@pytest.mark.parametrize("path", PATHS[:2])
@pytest.mark.parametrize("layout", ["jfif", "jfif+exif+xmp", "bare", "trailing", "progressive", "restarts", "4:4:4"])
def test_every_byte_outside_the_manifest_is_bound(
    ca: SigningPaths, layout: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the manifest's own place is left out of the hash: a flipped byte before it (the JFIF header), right after
    it (the XMP note naming the requester), in the scan or at the end of image reads Invalid, wherever the file's
    leading segments put the manifest, and bytes after the end of image too (box hashing leaves such a file to the
    data hash); so does the manifest cut out, or moved behind the XMP note."""
    _use(path, monkeypatch)
    data = encode(page_image(400, 300))
    if layout == "jfif+exif+xmp":
        exif = b"Exif\x00\x00" + b"MM\x00*\x00\x00\x00\x08\x00\x00"
        data = splice_xmp(data[:2] + b"\xff\xe1" + (len(exif) + 2).to_bytes(2, "big") + exif + data[2:], "<x/>")
    elif layout == "bare":  # no JFIF segment: the manifest goes right after the start-of-image marker
        data = data[:2] + data[4 + int.from_bytes(data[4:6], "big") :]
    elif layout == "trailing":  # bytes after the end of image, which c2pa's box map does not cover
        data += b"trailing bytes a box hash would not bind"
    elif layout in ("progressive", "restarts", "4:4:4"):  # several scans; restart markers in the scan; no subsampling
        options = {"progressive": {"progressive": True}, "restarts": {"restart_marker_blocks": 4}}
        buffer = io.BytesIO()
        page_image(400, 300).save(buffer, "JPEG", quality=80, **options.get(layout, {"subsampling": 0}))
        data = buffer.getvalue()
    signed = sign_jpeg(data, public_manifest(SOURCE, MASTER_SHA, "jpeg", "display"), ca)
    assert read_credentials(signed, ca.anchor).state == "Trusted"
    pieces, slot = signable_pieces(data)
    start = sum(len(piece) for piece in pieces[:slot])
    end = start + len(signed) - len(data)
    assert signed[:start] == data[:start] and signed[end:] == data[start:]
    for at in {0, 3, start - 1, end, end + 5, (end + len(signed)) // 2, len(signed) - 1}:
        assert read_credentials(_flip(signed, at), ca.anchor).state != "Trusted", (layout, at)
    later = splice_xmp(signed, "<x>moved</x>")
    assert read_credentials(later, ca.anchor).state != "Trusted"
    assert read_credentials(signed[:start] + signed[end:], ca.anchor).state is None


def test_a_wrongly_remembered_manifest_length_is_never_signed_into_a_file(
    ca: SigningPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a data hash, the manifest's length is remembered per shape of definition; when it is wrong (here:
    poisoned), the file is signed again with the length c2pa asks for, and reads Trusted."""
    from imagesvc.provenance import box_hashed, data_hashed

    data = encode(page_image(300, 200))
    manifest = public_manifest(SOURCE, MASTER_SHA, "jpeg", "display")
    data_hashed._LENGTHS.clear()
    monkeypatch.setattr(box_hashed, "AVAILABLE", False)
    sign_jpeg(data, manifest, ca)
    assert data_hashed._LENGTHS, "the first signature should remember its manifest's length"
    for shape in data_hashed._LENGTHS:
        data_hashed._LENGTHS[shape] += 7
    signed = sign_jpeg(data, manifest, ca)
    assert read_credentials(signed, ca.anchor).state == "Trusted"
    assert list(data_hashed._LENGTHS.values()) == [len(signed) - len(data)]


def test_box_names_tile_only_what_c2pa_maps() -> None:
    """The box names match c2pa's map of a plain JPEG; files its map would not cover exactly get None (and a data
    hash): fill bytes before a marker, bytes after the end of image, a truncated scan, an APP11 segment."""
    data = encode(page_image(120, 90))
    names = box_names(data)
    assert names is not None and names[:2] == ["SOI", "APP0"] and names[-2:] == ["SOS", "EOI"]
    assert "DQT" in names and "SOF0" in names and "DHT" in names
    assert box_names(data[:2] + b"\xff" + data[2:]) is None
    assert box_names(data + b"x") is None
    assert box_names(data[:-2]) is None
    assert box_names(data[:2] + b"\xff\xeb\x00\x04ab" + data[2:]) is None


def test_the_stored_run_is_hashed_once_per_object_and_content(ca: SigningPaths) -> None:
    """A stored object's unchanging segments are hashed once per (object key, ETag); the same key with other content
    (a rewrite in place) is another entry, and both deliveries read Trusted."""
    first, second = encode(page_image(300, 200)), encode(page_image(200, 300))
    manifest = public_manifest(SOURCE, MASTER_SHA, "jpeg", "display")
    for data, etag in ((first, "e1"), (first, "e1"), (second, "e2")):
        signed = sign_jpeg(data, manifest, ca, "<x>note</x>", ("clean/b/1/display.jpg", etag, len(data)))
        assert read_credentials(signed, ca.anchor).state == "Trusted", etag
    kept = {key for key in box_hashed.STORED_RUNS._runs if key[0] == "clean/b/1/display.jpg"}
    assert kept == {("clean/b/1/display.jpg", "e1", len(first)), ("clean/b/1/display.jpg", "e2", len(second))}


def _saved(img: Image.Image, fmt: str = "JPEG", **options: object) -> bytes:
    buffer = io.BytesIO()
    img.save(buffer, fmt, **options)
    return buffer.getvalue()


@pytest.mark.parametrize(
    "kind", ["cmyk-adobe", "exif-rotated", "icc-swapped", "comment", "grey", "big-icc", "mpo", "optimized"]
)
def test_a_clean_copy_of_any_scanner_jpeg_signs_trusted(ca: SigningPaths, kind: str) -> None:
    """A clean full tier can be the uploaded master itself (a JPEG copied untouched), so whatever segments a scanner
    wrote reach the signer: each of these reads Trusted with its note, box-hashed or (an MPO's second picture lies
    after the first end of image) data-hashed."""
    img = page_image(300, 200)
    data = {
        "cmyk-adobe": lambda: cmyk_jpeg((200, 150)),
        "exif-rotated": lambda: exif_rotated_jpeg((300, 150)),
        "icc-swapped": lambda: icc_swapped_jpeg((200, 150)),
        "comment": lambda: _saved(img, comment=b"scanned by a museum"),
        "grey": lambda: _saved(img.convert("L")),
        "big-icc": lambda: _saved(img, icc_profile=b"x" * 70_000),  # an ICC profile over two APP2 segments
        "mpo": lambda: _saved(img, "MPO", save_all=True, append_images=[img.rotate(90)]),
        "optimized": lambda: _saved(img, optimize=True),
    }[kind]()
    manifest = public_manifest(SOURCE, MASTER_SHA, "jpeg", "full")
    signed = sign_jpeg(data, manifest, ca, "<x>note</x>", ("clean/b/1/full.jpg", kind, len(data)))
    found = read_credentials(signed, ca.anchor)
    assert found.state == "Trusted", (kind, found.failures)
    assert (box_names(data) is None) == (kind == "mpo")
