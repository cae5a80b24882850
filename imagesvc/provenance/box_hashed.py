"""Signing a JPEG with a C2PA box hash, so a delivery hashes only what is new in it.

A data hash covers the whole file in one SHA-256, so every delivery to a key hashes its half megabyte again although
only its XMP note is new. A ``c2pa.hash.boxes`` assertion hashes runs of JPEG segments ("boxes", named as c2pa names
them: SOI, APP0, DQT, SOS with its image data, EOI, ...) one run at a time. The stored tier's segments and image data
are one run whose names and hash are kept per stored object (keyed by its object key and the store's strong ETag);
a delivery hashes its leading segments and its new note, a few kilobytes, and c2pa signs in one native call
(``c2pa_builder_sign_embeddable``, with the signer the context holds) with no stream and no placeholder: the
manifest's place is a box of its own, so its length need not be known in advance.

Only files that c2pa's box map tiles exactly are signed this way: no fill bytes between segments, no markers c2pa
does not name, nothing after the end of image, no APP11 segment (c2pa leaves short ones out of its map), no restart
intervals (c2pa's map of such a scan does not validate). Anything else returns None and is signed with a data hash,
which covers every byte.

``c2pa_builder_sign_embeddable`` is not wrapped by c2pa-python 0.38 (``c2pa_native`` binds it, under the exact
c2pa version it was checked against). Where it is missing or not bound, ``AVAILABLE`` is False.
"""

from __future__ import annotations

import ctypes
import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any

from imagesvc.provenance.c2pa_native import Bytes, bind, take

__all__ = ["AVAILABLE", "box_names", "sign_box_hashed"]

# No DRI: c2pa's map of a scan with restart markers disagrees with its own hashing of it (such files read Invalid),
# so files with restart intervals get a data hash.
_NAMES = {0xD8: "SOI", 0xDA: "SOS", 0xC4: "DHT", 0xDB: "DQT", 0xFE: "COM", 0xCC: "DAC"}
_NAMES |= {0xC0: "SOF0", 0xC1: "SOF1", 0xC2: "SOF2"}  # the frame markers c2pa names; others fail its map
_NAMES |= {0xE0 + n: f"APP{n}" for n in range(16) if n != 11}
# Where c2pa ends a scan's image data: a 0xFF that is neither byte stuffing (0x00) nor a restart marker.
_SCAN_END = re.compile(rb"\xff[^\x00\xd0-\xd7]")


_BOUND = bind("c2pa_builder_sign_embeddable", [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(Bytes)])
_NATIVE, _SIGN = _BOUND or (None, None)
AVAILABLE = _BOUND is not None


def box_names(data: bytes | memoryview) -> list[str] | None:
    """c2pa's names for the boxes that tile ``data`` (whole segments, or a scan with what follows it up to the end of
    image) exactly, in order; None when they do not."""
    names: list[str] = []
    pos, size = 0, len(data)
    while pos < size:
        if pos + 2 > size or data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xD9:  # end of image: the last box
            return [*names, "EOI"] if pos + 2 == size else None
        if marker == 0xD8:
            names.append("SOI")
            pos += 2
            continue
        name = _NAMES.get(marker)
        if name is None or pos + 4 > size:
            return None
        end = pos + 2 + int.from_bytes(data[pos + 2 : pos + 4], "big")
        if end > size:
            return None
        if marker == 0xDA:  # the scan's box runs on over its image data
            found = _SCAN_END.search(data, end)
            if found is None:
                return None
            end = found.start()
        names.append(name)
        pos = end
    return names


class _Runs:
    """The names and SHA-256 of stored runs of segments, per stored object; a bounded, thread-safe LRU."""

    def __init__(self, kept: int) -> None:
        self._kept = kept
        self._runs: OrderedDict[Hashable, tuple[list[str], bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable | None, pieces: Sequence[bytes | memoryview]) -> tuple[list[str], bytes] | None:
        if key is not None:
            with self._lock:
                if (run := self._runs.get(key)) is not None:
                    self._runs.move_to_end(key)
                    return run
        names: list[str] = []
        digest = hashlib.sha256()
        for piece in pieces:
            found = box_names(piece)
            if found is None:
                return None
            names += found
            digest.update(piece)
        run = (names, digest.digest())
        if key is not None:
            with self._lock:
                self._runs[key] = run
                while len(self._runs) > self._kept:
                    self._runs.popitem(last=False)
        return run


STORED_RUNS = _Runs(kept=20_000)  # ~200 bytes an entry


def _entry(names: list[str], digest: bytes) -> dict[str, Any]:
    return {"names": names, "alg": "sha256", "hash": list(digest), "pad": []}


def sign_box_hashed(
    definition: dict[str, Any],
    context: Any,
    pieces: Sequence[bytes | memoryview],
    slot: int,
    fresh: int,
    stored_key: Hashable | None = None,
) -> bytes | None:
    """The JPEG that ``pieces`` join into (no C2PA manifest in it), signed with a manifest made from ``definition``
    under ``context`` (which holds the signer) and placed before ``pieces[slot]``; None when c2pa's boxes do not tile
    the pieces (the caller signs with a data hash).

    ``pieces[slot:slot + fresh]`` are new to this file (a delivery's XMP note); the pieces after them come unchanged
    from the stored object ``stored_key`` names (object key and strong ETag), whose run is hashed once per object.
    Raises what c2pa-python raises (``C2paError``).
    """
    lead = b"".join(pieces[:slot])
    new = b"".join(pieces[slot : slot + fresh])
    lead_names, new_names = box_names(lead), box_names(new)
    stored = STORED_RUNS.get(stored_key, pieces[slot + fresh :])
    if lead_names is None or new_names is None or stored is None:
        return None
    boxes = [_entry(lead_names, hashlib.sha256(lead).digest()), {"names": ["C2PA"], "hash": [], "pad": []}]
    if new_names:
        boxes.append(_entry(new_names, hashlib.sha256(new).digest()))
    boxes.append(_entry(*stored))
    definition = {
        **definition,
        "assertions": [*definition.get("assertions", []), {"label": "c2pa.hash.boxes", "data": {"boxes": boxes}}],
    }
    builder = _NATIVE.Builder(definition, context=context)
    out = Bytes()
    try:
        with builder._exclusive_native_call():
            size = _SIGN(builder._handle, b"image/jpeg", ctypes.byref(out))
        manifest = take(_NATIVE, size, out, "Signing the manifest")
    finally:
        builder.close()
    return b"".join([*pieces[:slot], manifest, *pieces[slot:]])
