"""`imagesvc doctor`: every check says ok, warn or fail with what to do; any failure makes the exit code 1."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from imagesvc.cli import main
from imagesvc.storage.s3 import S3Config, S3Store
from tests.library import copy_library
from tests.servers import S3Server, refused_port

SEVERITY = {"ok": 0, "warn": 1, "fail": 2}


def _doctor(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], **env: str) -> tuple[int, dict]:
    for name, value in env.items():
        monkeypatch.setenv(f"IMAGESVC_{name.upper()}", value)
    code = main(["doctor", "--json"])
    worst: dict[str, dict] = {}  # per check, its most severe finding
    for finding in json.loads(capsys.readouterr().out):
        seen = worst.get(finding["check"])
        if seen is None or SEVERITY[finding["level"]] > SEVERITY[seen["level"]]:
            worst[finding["check"]] = finding
    return code, worst


def test_the_embedded_default_passes_with_warnings(
    demo_library: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = copy_library(demo_library["data"], tmp_path / "data")
    code, found = _doctor(monkeypatch, capsys, data_dir=str(data), session_secret="s")
    assert code == 0
    assert found["storage"]["level"] == found["catalog"]["level"] == found["access"]["level"] == "ok"
    assert found["clip"]["level"] == "warn" and "full-text only" in found["clip"]["message"]


def test_a_language_without_its_dictionary_is_a_warning_that_says_how_to_add_it(
    demo_library: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from imagesvc.search import dictionaries

    data = copy_library(demo_library["data"], tmp_path / "data")
    monkeypatch.setattr(dictionaries, "ARABIC_FOLDERS", (tmp_path / "no-dictionary",))
    code, found = _doctor(monkeypatch, capsys, data_dir=str(data), session_secret="s")
    assert code == 0  # a warning: Arabic queries are still searched, by the model alone
    finding = found["query glosses"]
    assert finding["level"] == "warn" and "no dictionary for ar" in finding["message"]
    assert "dict-freedict-ara-eng" in finding["message"]
    _code, off = _doctor(monkeypatch, capsys, data_dir=str(data), session_secret="s", text_model="off")
    assert off["query glosses"]["level"] == "ok" and "off" in off["query glosses"]["message"]


def test_failures_name_what_to_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with refused_port() as port:
        code, found = _doctor(
            monkeypatch,
            capsys,
            data_dir=str(tmp_path),
            access_backend="redis",
            redis_url=f"redis://127.0.0.1:{port}/0",
            clip_weights=str(tmp_path / "missing.safetensors"),
        )
    assert code == 1
    assert found["access"]["level"] == "fail" and "IMAGESVC_REDIS_URL" in found["access"]["message"]
    assert found["clip"]["level"] == "fail" and "missing.safetensors" in found["clip"]["message"]
    assert found["catalog"]["level"] == "warn" and "imagesvc ingest" in found["catalog"]["message"]
    assert found["secrets"]["level"] == "fail"  # a Redis deployment is shared: the colophon secret must be explicit


def test_a_private_bucket_passes_the_privacy_check(
    ceph_rgw: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ceph RGW enforces access control (moto does not), so only it can say whether unsigned reads are refused."""
    config = S3Config(
        ceph_rgw.endpoint_url, "doctor-private", ceph_rgw.region, ceph_rgw.access_key, ceph_rgw.secret_key
    )

    async def make_bucket() -> None:
        store = S3Store(config)
        await store.ensure_bucket()
        await store.close()

    asyncio.run(make_bucket())
    code, found = _doctor(
        monkeypatch,
        capsys,
        data_dir=str(tmp_path),
        storage="s3",
        image_host="https://img.example",
        s3_endpoint=ceph_rgw.endpoint_url,
        s3_bucket="doctor-private",
        s3_access_key=ceph_rgw.access_key,
        s3_secret_key=ceph_rgw.secret_key,
        colophon_secret="shared",
        session_secret="s",
    )
    assert found["storage"]["level"] == "ok"
    assert found["privacy"]["level"] == "ok", found["privacy"]
    assert code == 0


def test_c2pa_local_ca_warns_and_a_refused_chain_fails(
    demo_library: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = copy_library(demo_library["data"], tmp_path / "data")
    code, found = _doctor(monkeypatch, capsys, data_dir=str(data), session_secret="s")
    assert code == 0
    assert found["c2pa"]["level"] == "warn" and "unknown issuer" in found["c2pa"]["message"]
    # An operator's chain whose leaf is its own issuer (a self-signed certificate): C2PA validators refuse it.
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "self")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(datetime.now(UTC) - timedelta(days=1))
        .not_valid_after(datetime.now(UTC) + timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    (tmp_path / "chain.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pkcs8 = serialization.PrivateFormat.PKCS8
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, pkcs8, serialization.NoEncryption())
    )
    code, found = _doctor(
        monkeypatch,
        capsys,
        data_dir=str(data),
        session_secret="s",
        c2pa_cert_chain=str(tmp_path / "chain.pem"),
        c2pa_private_key=str(tmp_path / "key.pem"),
    )
    assert code == 1
    assert found["c2pa"]["level"] == "fail" and "chain.pem" in found["c2pa"]["message"]
    assert "BEGIN" not in capsys.readouterr().out  # no key material in the report
