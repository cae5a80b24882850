"""Settings: strict parsing whose errors name the variable, and README documents every setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagesvc.settings import FIELDS, SettingsError, env_name, load_settings

README = Path(__file__).resolve().parent.parent / "README.md"


def test_defaults_are_the_embedded_default() -> None:
    s = load_settings({})
    assert (s.storage, s.port, s.host, s.access_backend) == ("local", 8080, "127.0.0.1", "sqlite")
    assert s.image_base == "http://127.0.0.1:8080/img"


def test_values_are_parsed() -> None:
    s = load_settings(
        {"IMAGESVC_PORT": "9000", "IMAGESVC_TRUSTED_PROXIES": "10.0.0.1, 192.0.2.0/24", "IMAGESVC_DATA_DIR": "/tmp/x"}
    )
    assert s.port == 9000
    assert s.trusted_proxies == ("10.0.0.1", "192.0.2.0/24")
    assert s.data_dir == Path("/tmp/x")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("IMAGESVC_PORT", "eighty"),
        ("IMAGESVC_PORT", "70000"),
        ("IMAGESVC_STORAGE", "ftp"),
        ("IMAGESVC_SITE_URL", "example.org"),
        ("IMAGESVC_DISPLAY_SIZE", "0"),
        ("IMAGESVC_JPEG_QUALITY", "100"),
        ("IMAGESVC_ASSISTANT_NETWORKS", "10.0.0.0/8,banana"),
        ("IMAGESVC_TRUSTED_PROXIES", "10.0.0.300"),
        ("IMAGESVC_HOT_CACHE_BYTES", "-1"),
        ("IMAGESVC_SNAPSHOT_PREFIX", "pub/snapshots"),
    ],
)
def test_bad_values_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        load_settings({name: value})


def test_unknown_variable_is_refused_with_the_known_ones() -> None:
    with pytest.raises(SettingsError, match=r"unknown setting IMAGESVC_PROT.*IMAGESVC_PORT"):
        load_settings({"IMAGESVC_PROT": "1"})


def test_s3_needs_an_image_host() -> None:
    with pytest.raises(SettingsError, match="IMAGESVC_IMAGE_HOST"):
        load_settings({"IMAGESVC_STORAGE": "s3"})


def test_secrets_are_masked() -> None:
    shown = load_settings({"IMAGESVC_S3_SECRET_KEY": "hunter2"}).public_dict()
    assert shown["IMAGESVC_S3_SECRET_KEY"] == "***"


def test_readme_documents_every_setting() -> None:
    text = README.read_text(encoding="utf-8")
    missing = [env_name(f) for f in FIELDS if f"`{env_name(f)}`" not in text]
    assert not missing, f"README.md does not document {missing}"


def test_load_settings_says_it_returns_settings() -> None:
    """Readers and type checkers see the fields: the signature names ``Settings``, not ``Any``, and so do the app,
    the services and the commands that receive it."""
    import typing

    from imagesvc.app import build_app
    from imagesvc.services import Services
    from imagesvc.settings import Settings

    assert typing.get_type_hints(load_settings)["return"] is Settings
    assert typing.get_type_hints(build_app)["settings"] is Settings
    assert typing.get_type_hints(Services.__init__)["settings"] is Settings
    assert isinstance(load_settings({}), Settings)
