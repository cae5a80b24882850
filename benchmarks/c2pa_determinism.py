"""Can two deliveries of the same image to the same key be byte-identical? What c2pa-python allows, measured.

Run: ``.venv/bin/python benchmarks/c2pa_determinism.py DATA_DIR`` (a data dir made by ``imagesvc demo``, whose
``c2pa/`` holds the local signing CA, and whose store holds clean display tiers).

It signs one JPEG twice with the same manifest three ways: c2pa's own ES256 signer (random ECDSA nonces), a
callback signer with random nonces, and a callback signer with RFC 6979 deterministic nonces (cryptography's
``deterministic_signing``), and prints the time per signature and how many bytes of the two results differ. Then it
fixes the manifest's label and instance id too, and prints where the results still differ: the 16-byte salts c2pa
draws for each hashed assertion (no setting of c2pa-python 0.38.1 fixes them), the hashes over them, and the
signature over those.
"""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path

import c2pa
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

MANIFEST = {
    "claim_generator_info": [{"name": "imagesvc", "version": "bench"}],
    "title": "page.jpg",
    "format": "image/jpeg",
    "assertions": [{"label": "org.example.delivery", "data": {"key_ref": "abcd1234"}}],
}
SETTINGS = {"builder": {"thumbnail": {"enabled": False}}, "verify": {"verify_after_sign": False}}


def main() -> None:
    data_dir = Path(sys.argv[1])
    pem = (data_dir / "c2pa" / "signer.key").read_bytes()
    chain = (data_dir / "c2pa" / "chain.pem").read_bytes()
    jpeg = next((data_dir / "store" / "clean").rglob("display.jpg")).read_bytes()
    key = serialization.load_pem_private_key(pem, None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)

    def raw(data: bytes, deterministic: bool) -> bytes:
        r, s = decode_dss_signature(key.sign(data, ec.ECDSA(hashes.SHA256(), deterministic_signing=deterministic)))
        return r.to_bytes(32, "big") + s.to_bytes(32, "big")

    def signer(kind: str) -> c2pa.Signer:
        if kind == "c2pa ES256":
            return c2pa.Signer.from_info(c2pa.C2paSignerInfo(b"es256", chain, pem, None))
        deterministic = kind == "callback RFC 6979"
        return c2pa.Signer.from_callback(lambda d: raw(d, deterministic), c2pa.C2paSigningAlg.ES256, chain.decode())

    def sign(with_signer: c2pa.Signer, manifest: dict) -> bytes:
        builder = c2pa.Builder(manifest, context=c2pa.Context(settings=c2pa.Settings.from_dict(SETTINGS)))
        out = io.BytesIO()
        builder.sign(with_signer, "image/jpeg", io.BytesIO(jpeg), out)
        builder.close()
        return out.getvalue()

    def differ(a: bytes, b: bytes) -> list[int]:
        return [i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y] + list(
            range(min(len(a), len(b)), max(len(a), len(b)))
        )

    for kind in ("c2pa ES256", "callback random", "callback RFC 6979"):
        chosen = signer(kind)
        a, b = sign(chosen, MANIFEST), sign(chosen, MANIFEST)
        start, rounds = time.perf_counter(), 40
        for _ in range(rounds):
            sign(chosen, MANIFEST)
        ms = (time.perf_counter() - start) / rounds * 1000
        print(f"{kind:18s} {ms:6.2f} ms a signature; two signatures differ in {len(differ(a, b))} bytes")
    fixed = {**MANIFEST, "label": "urn:c2pa:00000000-0000-4000-8000-000000000001"}
    fixed["instance_id"] = "xmp:iid:00000000-0000-4000-8000-000000000002"
    chosen = signer("callback RFC 6979")
    a, b = sign(chosen, fixed), sign(chosen, fixed)
    positions = differ(a, b)
    print(f"RFC 6979, fixed label and instance id: {len(positions)} bytes still differ, in runs:")
    runs: list[list[int]] = []
    for i in positions:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    for low, high in runs:
        print(f"  {high - low + 1:3d} bytes at {low} after {a[max(0, low - 20) : low]!r}")


if __name__ == "__main__":
    main()
