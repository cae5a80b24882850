"""Signing JPEGs with a C2PA manifest, and reading a file's Content Credentials back.

One signer per thread and signing key (c2pa handles are not shared across threads). The ES256 signer is c2pa's own
(made from the chain and key PEM, read once per thread), so a signature calls no Python. Thumbnails are off: they
would add up to half a megabyte to each file and 40-160 ms to each signature.
"""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import c2pa
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from imagesvc.errors import Unavailable
from imagesvc.imaging import PageRenditions, Rendition
from imagesvc.imaging.xmp import signable_pieces
from imagesvc.provenance import Delivery, PageSource, SigningPaths, box_hashed, data_hashed
from imagesvc.provenance.c2pa_native import fast_path_problem, turn_off
from imagesvc.provenance.manifests import delivery_manifest, public_manifest

__all__ = ["Credentials", "read_credentials", "sign_delivery", "sign_jpeg", "sign_page"]

_SIGN_SETTINGS = {"builder": {"thumbnail": {"enabled": False}}, "verify": {"verify_after_sign": False}}
_local = threading.local()
log = logging.getLogger("imagesvc.provenance")


class _Signing(NamedTuple):
    """One thread's c2pa objects for one signing key: a context and a signer (data-hashed signing and
    ``Builder.sign``), and a context that holds a signer of its own (box-hashed signing takes the context's)."""

    context: c2pa.Context
    signer: c2pa.Signer
    signer_context: c2pa.Context


def _signing(paths: SigningPaths) -> _Signing:
    cache: dict[SigningPaths, _Signing] = _local.__dict__.setdefault("signers", {})
    if paths not in cache:
        try:
            pem = paths.key.read_bytes()
            key = serialization.load_pem_private_key(pem, password=None)
            if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
                raise ValueError("the private key is not a P-256 ECDSA key (ES256 needs one)")
            chain = paths.chain.read_bytes()

            def signer() -> c2pa.Signer:
                return c2pa.Signer.from_info(c2pa.C2paSignerInfo(b"es256", chain, pem, None))

            settings = c2pa.Settings.from_dict(_SIGN_SETTINGS)
            cache[paths] = _Signing(
                c2pa.Context(settings=settings), signer(), c2pa.Context(settings=settings, signer=signer())
            )
        except (OSError, ValueError, c2pa.C2paError) as exc:
            raise Unavailable(
                f"Cannot load the C2PA signing key or chain ({paths.chain}): {exc}",
                recovery=["Run `imagesvc doctor`; docs/provenance.md says what the chain needs."],
            ) from exc
    return cache[paths]


def sign_jpeg(
    data: bytes,
    manifest: dict[str, Any],
    paths: SigningPaths,
    xmp: str | None = None,
    stored_key: Hashable | None = None,
) -> bytes:
    """``data`` (a JPEG; any C2PA manifest it carries is dropped first, and its XMP note set to ``xmp`` when given)
    signed with ``manifest``. ``stored_key`` (an object key and the store's strong ETag) names ``data`` as a stored
    object whose unchanging segments need hashing only once.

    Raises ``Unavailable`` when the key cannot be loaded or c2pa refuses to sign (the message says why), and
    ``ImageRejected`` when ``data`` is not a well-formed JPEG.
    """
    signing = _signing(paths)
    pieces, slot = signable_pieces(data, xmp)
    if box_hashed.AVAILABLE and fast_path_problem() is None:
        fresh = 0 if xmp is None else 1  # the new note is the piece at the manifest's place
        signed = _fast(
            "box-hashed",
            box_hashed.sign_box_hashed,
            manifest,
            signing.signer_context,
            pieces,
            slot,
            fresh,
            stored_key,
        )
        if signed is not None:
            return signed
    if data_hashed.AVAILABLE and fast_path_problem() is None:
        sign = data_hashed.sign_data_hashed
        signed = _fast("data-hashed", sign, manifest, signing.context, signing.signer, pieces, slot)
        if signed is not None:
            return signed
    out = io.BytesIO()
    try:
        builder = c2pa.Builder(manifest, context=signing.context)
        try:
            builder.sign(signing.signer, "image/jpeg", io.BytesIO(b"".join(pieces)), out)
        finally:
            builder.close()
    except (c2pa.C2paError, OSError) as exc:
        raise Unavailable(
            f"Signing the image's Content Credentials failed: {exc}", recovery=["Run `imagesvc doctor`."]
        ) from exc
    return out.getvalue()


def _fast(name: str, sign: Callable[..., bytes | None], *args: Any) -> bytes | None:
    """``sign(*args)`` (a fast path, which leans on c2pa-python's internals); None when it declines or fails, so the
    caller signs through c2pa-python's public API. A failure other than c2pa's own error (a renamed internal, a missing
    symbol) turns the fast paths off for this process; a request never fails because of one."""
    try:
        return sign(*args)
    except c2pa.C2paError as exc:
        log.warning("%s signing failed (%s); signing this file through Builder.sign", name, exc)
    except Exception as exc:
        turn_off(f"{name} signing raised {type(exc).__name__}: {exc}")
    return None


def sign_page(page: PageRenditions, source: PageSource, master_sha256: str, paths: SigningPaths) -> PageRenditions:
    """``page`` with every marked public tier (page and illustrations) signed; unmarked tiers are left as they are.

    A signed rendition keeps the sha256 of its unsigned bytes: keys and catalog hashes address the image content.
    """

    def signed(clean: dict[str, Rendition], public: dict[str, Rendition]) -> dict[str, Rendition]:
        out = {}
        for tier, rendition in public.items():
            if rendition.data == clean[tier].data:  # below the mark threshold: the public tier is the clean one
                out[tier] = rendition
                continue
            manifest = public_manifest(source, master_sha256, page.master_format, tier)
            # The sha256 (and so the object key) stays that of the image without its manifest: manifests carry
            # random salts, and a rerun after a crash must find the object the first run wrote, not orphan it.
            out[tier] = replace(rendition, data=sign_jpeg(rendition.data, manifest, paths))
        return out

    illustrations = [replace(i, public=signed(i.clean, i.public)) for i in page.illustrations]
    return replace(page, public=signed(page.clean, page.public), illustrations=illustrations)


def sign_delivery(
    stored: bytes, xmp: str, delivery: Delivery, paths: SigningPaths, stored_key: Hashable | None = None
) -> bytes:
    """The bytes of one delivery to a key: the ``stored`` tier with its XMP note set to ``xmp``, then signed with a
    per-request manifest (mark, then note, then signature: anything written after signing would break it).
    ``stored_key``: see ``sign_jpeg``."""
    return sign_jpeg(stored, delivery_manifest(delivery), paths, xmp, stored_key)


@dataclass(frozen=True)
class Credentials:
    """A file's Content Credentials as a validator sees them: state (Trusted, Valid, Invalid, or None when the file
    carries none), the active manifest as JSON, and the validation failure codes."""

    state: str | None
    manifest: dict[str, Any]
    failures: list[str]

    def assertion(self, label: str) -> dict[str, Any] | None:
        for item in self.manifest.get("assertions", []):
            if item["label"] == label:
                return item["data"]
        return None


def read_credentials(data: bytes, anchors: Path | None = None) -> Credentials:
    """Read and validate the C2PA manifest of a JPEG; ``anchors`` (a PEM file) are trusted roots."""
    settings: dict[str, Any] = {"verify": {"verify_trust": anchors is not None}}
    if anchors is not None:
        settings["trust"] = {"user_anchors": anchors.read_text()}
    context = c2pa.Context(settings=c2pa.Settings.from_dict(settings))
    try:
        reader = c2pa.Reader("image/jpeg", io.BytesIO(data), context=context)
    except c2pa.C2paError.ManifestNotFound:
        return Credentials(None, {}, [])
    except c2pa.C2paError as exc:
        return Credentials("Invalid", {}, [f"{type(exc).__name__}: {exc}"])
    try:
        report = json.loads(reader.json())
        state = reader.get_validation_state()
    finally:
        reader.close()
    manifest = report.get("manifests", {}).get(report.get("active_manifest"), {})
    failures = [item["code"] for item in report.get("validation_status") or []]
    return Credentials(state, manifest, failures)
