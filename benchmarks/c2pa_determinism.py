"""Can two signatures of the same delivery be byte-identical? Built-in ES256 signer vs a callback signer with RFC 6979."""
import io, time, sys, hashlib, json
from pathlib import Path
import c2pa, cryptography
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

ca = Path(sys.argv[1]); jpeg = Path(sys.argv[2]).read_bytes()
chain = (ca / "chain.pem") if (ca / "chain.pem").exists() else None
files = {p.name: p for p in ca.iterdir()}
print(sorted(files), "cryptography", cryptography.__version__)
pem = files["signer.key"].read_bytes(); chainpem = files["chain.pem"].read_bytes()
key = serialization.load_pem_private_key(pem, None)
manifest = {"claim_generator_info": [{"name": "imagesvc", "version": "x"}], "title": "t.jpg", "format": "image/jpeg",
            "assertions": [{"label": "org.example.delivery", "data": {"key_ref": "abcd1234"}}]}
settings = c2pa.Settings.from_dict({"builder": {"thumbnail": {"enabled": False}}, "verify": {"verify_after_sign": False}})

def raw_sig(data: bytes, deterministic: bool) -> bytes:
    der = key.sign(data, ec.ECDSA(hashes.SHA256(), deterministic_signing=deterministic))
    r, s = decode_dss_signature(der)
    return r.to_bytes(32, "big") + s.to_bytes(32, "big")

def signer(kind: str):
    if kind == "builtin":
        return c2pa.Signer.from_info(c2pa.C2paSignerInfo(b"es256", chainpem, pem, None))
    return c2pa.Signer.from_callback(lambda d: raw_sig(d, kind == "rfc6979"), c2pa.C2paSigningAlg.ES256, chainpem.decode())

def sign(s) -> bytes:
    ctx = c2pa.Context(settings=settings)
    b = c2pa.Builder(manifest, context=ctx); out = io.BytesIO()
    b.sign(s, "image/jpeg", io.BytesIO(jpeg), out); b.close()
    return out.getvalue()

def diff(a: bytes, b: bytes) -> str:
    n = sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))
    return f"{n} bytes differ" + ("" if n else " (identical)")

for kind in ("builtin", "random-callback", "rfc6979"):
    s = signer(kind)
    outs = [sign(s) for _ in range(2)]
    t = time.perf_counter(); N = 40
    for _ in range(N): sign(s)
    ms = (time.perf_counter() - t) / N * 1000
    print(f"{kind:16s} {ms:6.2f} ms/sign  two signings: {diff(*outs)}")
    if kind == "rfc6979":
        a, b = outs
        idx = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
        if idx:
            print("  first differences at", idx[:5], "context:", a[idx[0]-40:idx[0]+20])
print("-- with a fixed manifest label and instance id:")
manifest["label"] = "urn:c2pa:00000000-0000-4000-8000-000000000001"
manifest["instance_id"] = "xmp:iid:00000000-0000-4000-8000-000000000002"
s = signer("rfc6979")
a, b = sign(s), sign(s)
print("rfc6979 + fixed ids:", diff(a, b))
idx = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
runs = []
for i in idx:
    if runs and i == runs[-1][1] + 1: runs[-1][1] = i
    else: runs.append([i, i])
for lo, hi in runs[:8]:
    print(f"  bytes {lo}-{hi} ({hi-lo+1}):", a[max(0, lo-24):lo])
