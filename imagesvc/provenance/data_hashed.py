"""Signing a JPEG through C2PA's data-hashed flow: this service places the manifest and hashes the file itself.

Deliveries and tiers are box-hashed (``box_hashed``) where c2pa's box map tiles the file; this is for the rest, and
its one hash covers every byte but the manifest's place.

``Builder.sign`` hands c2pa the whole file as a stream: c2pa reads it, writes a copy with a placeholder, hashes it
and patches the signature in, calling back into Python for every read, write and seek (about ninety a display tier),
each taking the GIL back from the event loop. Here the definition carries a ``c2pa.hash.data`` assertion; ``hashlib``
hashes the file (without the GIL) and c2pa signs that assertion with one exclusion, the manifest's own place, in one
native call with no callback; the signed manifest, already cut into APP11 segments, is spliced in.

The hash of the file with the manifest excluded is the hash of the file before the manifest went in, so it is taken
over the pieces of the file as they come (the stored file's own bytes, a new XMP note), and the file is copied once,
when the pieces and the manifest are joined. The exclusion must name the manifest's
length before the manifest exists: a manifest's size depends only on its definition's shape (the lengths of its
texts), so each shape's length is learnt from its first signature, and a signature whose length is not the one its
exclusion declares is thrown away and made again with the length it showed.

c2pa-python 0.38 does not wrap this function of its native library (``c2pa_native`` binds it, under the exact c2pa
version it was checked against). Where it is missing or not bound, ``AVAILABLE`` is False and callers sign through
``Builder.sign``.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
from collections.abc import Sequence
from typing import Any

from imagesvc.provenance.c2pa_native import Bytes, bind, take

__all__ = ["AVAILABLE", "sign_data_hashed"]

_HASH_LABEL = "c2pa.hash.data"
# Room for c2pa to write the real exclusion and hash over: a manifest keeps its size whatever numbers they hold.
_HASH_ROOM = {
    "label": _HASH_LABEL,
    "data": {
        "name": "jumbf manifest",
        "alg": "sha256",
        "hash": [0] * 32,
        "exclusions": [{"start": 0, "length": 2}] * 10,
        "pad": [],
    },
}


_BOUND = bind(
    "c2pa_builder_sign_data_hashed_embeddable",
    [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(Bytes)],
)
_NATIVE, _SIGN = _BOUND or (None, None)
AVAILABLE = _BOUND is not None

_LENGTHS: dict[Any, int] = {}  # a definition's shape -> its signed manifest's length in a JPEG
_LENGTHS_KEPT = 1024


def _shape(value: Any) -> Any:
    """``value`` (a manifest definition) with every text replaced by its UTF-8 length: what its manifest's size
    depends on, so definitions that differ only in their texts' letters share a length."""
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, dict):
        return tuple((key, _shape(item)) for key, item in value.items())
    if isinstance(value, list):
        return tuple(_shape(item) for item in value)
    return value


def _signed_manifest(builder: Any, signer: Any, digest: bytes, offset: int, length: int) -> bytes:
    """The manifest signed over ``digest`` with the exclusion (offset, length), cut into APP11 segments."""
    data_hash = {**_HASH_ROOM["data"], "hash": list(digest), "exclusions": [{"start": offset, "length": length}]}
    out = Bytes()
    with builder._exclusive_native_call(), signer._native_call():
        size = _SIGN(
            builder._handle, signer._handle, json.dumps(data_hash).encode(), b"image/jpeg", None, ctypes.byref(out)
        )
    return take(_NATIVE, size, out, "Signing the manifest")


def sign_data_hashed(
    definition: dict[str, Any], context: Any, signer: Any, pieces: Sequence[bytes | memoryview], slot: int
) -> bytes:
    """The JPEG that ``pieces`` join into (well formed, with no C2PA manifest), signed by ``signer`` with a manifest
    made from ``definition`` under ``context`` and placed before ``pieces[slot]``.

    Raises what c2pa-python raises (``C2paError``).
    """
    shape = _shape(definition)  # the room below is the same in every definition
    definition = {**definition, "assertions": [*definition.get("assertions", []), _HASH_ROOM]}
    offset = sum(len(piece) for piece in pieces[:slot])
    digest = hashlib.sha256()
    for piece in pieces:
        digest.update(piece)
    builder = _NATIVE.Builder(definition, context=context)
    try:
        length = _LENGTHS.get(shape, 0)
        manifest = _signed_manifest(builder, signer, digest.digest(), offset, length)
        if len(manifest) != length:  # not learnt yet, or learnt wrong: sign again with the length it showed
            length = len(manifest)
            manifest = _signed_manifest(builder, signer, digest.digest(), offset, length)
            if len(manifest) != length:  # the exclusion signed would not be the manifest's place: never hand it out
                raise _NATIVE.C2paError(f"c2pa made manifests of {length} and then {len(manifest)} bytes")
            if len(_LENGTHS) >= _LENGTHS_KEPT:
                _LENGTHS.clear()
            _LENGTHS[shape] = length
    finally:
        builder.close()
    return b"".join([*pieces[:slot], manifest, *pieces[slot:]])
