"""Signing credentials: an operator's certificate chain and key, or a local CA made on first run in the data folder.

The embedded default writes ``c2pa/root.pem`` (a self-made root), ``c2pa/chain.pem`` (an ES256 leaf, then the root)
and ``c2pa/signer.key`` (mode 0600) so that ``make run`` signs with no set-up. Public verifiers show such an issuer
as unknown; docs/provenance.md says how to get a certificate from a CA on the C2PA trust list.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from imagesvc.provenance import SigningPaths

__all__ = ["check_chain", "ensure_local_ca", "signing_paths"]

_VALID_DAYS = 3650
# C2PA validators accept a signing leaf with one of these EKUs; a leaf for TLS servers (serverAuth) is refused.
_SIGNING_EKUS = {ExtendedKeyUsageOID.EMAIL_PROTECTION, x509.ObjectIdentifier("1.3.6.1.5.5.7.3.36")}  # documentSigning


def _name(common: str, org: str) -> x509.Name:
    return x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, common), x509.NameAttribute(NameOID.ORGANIZATION_NAME, org)]
    )


def _usage(*, sign_certs: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not sign_certs,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=sign_certs,
        crl_sign=sign_certs,
        encipher_only=False,
        decipher_only=False,
    )


def _certificate(
    subject: x509.Name, key: ec.EllipticCurvePrivateKey, issuer: x509.Name, issuer_key: ec.EllipticCurvePrivateKey
) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=_VALID_DAYS))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False)
    )


def _write(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def ensure_local_ca(folder: Path, organisation: str) -> SigningPaths:
    """Create (once) a local root CA and an ES256 signing leaf in ``folder``; return their paths.

    Concurrent first starts (``serve --workers N``) agree: the set is written in a private temporary folder and
    renamed into place, and a loser of the race uses the winner's set.
    """
    paths = SigningPaths(folder / "chain.pem", folder / "signer.key", folder / "root.pem")
    if paths.chain.exists() and paths.key.exists():
        return paths
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))  # private: mode 0700
    root_key = ec.generate_private_key(ec.SECP256R1())
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    root_name = _name(f"{organisation} local provenance root", organisation)
    root = (
        _certificate(root_name, root_key, root_name, root_key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(sign_certs=True), critical=True)
        .sign(root_key, hashes.SHA256())
    )
    leaf = (
        _certificate(_name(f"{organisation} image signing", organisation), leaf_key, root_name, root_key)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(sign_certs=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.EMAIL_PROTECTION]), critical=False)
        .sign(root_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = leaf_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    _write(staging / "signer.key", key_pem, 0o600)
    _write(staging / "chain.pem", leaf.public_bytes(pem) + root.public_bytes(pem), 0o644)
    _write(staging / "root.pem", root.public_bytes(pem), 0o644)
    try:
        os.rename(staging, folder)  # atomic; fails if another process made the folder first
    except OSError:
        for name in ("signer.key", "chain.pem", "root.pem"):
            (staging / name).unlink(missing_ok=True)
        staging.rmdir()
    else:
        folder.chmod(0o755)  # the certificates are public; the key file itself stays 0600
    return paths


def signing_paths(settings: Any) -> SigningPaths:
    """The operator's chain and key when both settings are set, else the local CA (made on first use)."""
    if settings.c2pa_cert_chain or settings.c2pa_private_key:
        if not (settings.c2pa_cert_chain and settings.c2pa_private_key):
            from imagesvc.errors import Unavailable

            raise Unavailable(
                "Set both IMAGESVC_C2PA_CERT_CHAIN and IMAGESVC_C2PA_PRIVATE_KEY, or neither (a local CA is used).",
                recovery=["See docs/provenance.md."],
            )
        return SigningPaths(Path(settings.c2pa_cert_chain), Path(settings.c2pa_private_key))
    return ensure_local_ca(Path(settings.data_dir) / "c2pa", settings.site_name or "imagesvc")


def _extension(cert: x509.Certificate, kind: type[Any]) -> Any:
    try:
        return cert.extensions.get_extension_for_class(kind).value
    except x509.ExtensionNotFound:
        return None


def check_chain(paths: SigningPaths) -> list[str]:
    """Problems a C2PA validator would refuse the chain for; empty when it can sign. Reads nothing but the files."""
    try:
        certs = x509.load_pem_x509_certificates(paths.chain.read_bytes())
        key = serialization.load_pem_private_key(paths.key.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        return [f"cannot read the chain or key: {exc}"]
    leaf, problems = certs[0], []
    if leaf.public_key().public_numbers() != key.public_key().public_numbers():  # type: ignore[union-attr]
        problems.append("the private key does not belong to the first (leaf) certificate")
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        problems.append("the key is not an ECDSA P-256 key (ES256 is what this service signs with)")
    now = dt.datetime.now(dt.UTC)
    for cert in certs:
        if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
            problems.append(
                f"{cert.subject.rfc4514_string()} is not valid now (until {cert.not_valid_after_utc:%Y-%m-%d})"
            )
    if leaf.issuer == leaf.subject:
        problems.append("the leaf is self-signed: C2PA needs a leaf issued by a CA, then that CA's certificate")
    basic = _extension(leaf, x509.BasicConstraints)
    if basic is not None and basic.ca:
        problems.append("the leaf is a CA certificate (CA:TRUE); sign with an end-entity certificate")
    eku = _extension(leaf, x509.ExtendedKeyUsage)
    if eku is None or not set(eku) & _SIGNING_EKUS:
        problems.append("the leaf lacks the emailProtection or documentSigning extended key usage")
    if _extension(leaf, x509.AuthorityKeyIdentifier) is None:
        problems.append("the leaf lacks the authorityKeyIdentifier extension")
    if len(certs) < 2:
        problems.append("the chain holds only the leaf: append the issuing CA's certificate(s)")
    return problems
