"""A c2pa-python upgrade under the fast signing paths, which bind its internals (provenance/c2pa_native.py): another
version, a missing native symbol or an internal that raises turns them off with one log line and a doctor warning,
and keyed deliveries still go out signed through c2pa-python's public API; never a 500."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import c2pa
import pytest

from imagesvc.doctor import run_checks
from imagesvc.provenance import box_hashed, c2pa_native, data_hashed
from imagesvc.provenance.sign import read_credentials
from tests.http.conftest import MakeClient
from tests.http.keys import new_key
from tests.library import settings_for

PAGE = {"book": "demo-speculum-fornacum", "page": "2", "tier": "display"}
OFF = "C2PA fast signing is off"


@pytest.fixture
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The guard as a new process finds it (nothing turned off, the version not yet read), and a count of the
    signatures made through c2pa-python's public ``Builder.sign``."""
    c2pa_native._version_problem.cache_clear()
    monkeypatch.setattr(c2pa_native, "_off", [])
    public = [0]
    sign = c2pa.Builder.sign

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        public[0] += 1
        return sign(self, *args, **kwargs)

    monkeypatch.setattr(c2pa.Builder, "sign", counted)
    yield public
    c2pa_native._version_problem.cache_clear()


async def _keyed_delivery_reads_valid(make_client: MakeClient, data_dir: Path) -> None:
    client = await make_client()
    key, _ = new_key(data_dir, "free")
    for _ in range(2):
        response = await client.get("/api/image", params=PAGE, headers={"Authorization": f"Bearer {key}"})
        assert response.status == 200
        found = read_credentials(await response.read(), data_dir / "c2pa" / "root.pem")
        assert found.state in ("Valid", "Trusted"), found.failures


async def _doctor_warns(data_dir: Path) -> str:
    findings = await run_checks(settings_for(data_dir))
    (warning,) = [f for f in findings if f.check == "c2pa" and "fast signing is off" in f.message]
    assert warning.level == "warn"
    return warning.message


def test_the_installed_c2pa_is_the_pinned_one(fresh_process: list[int]) -> None:
    """The fast paths are on here: the pin in pyproject.toml and c2pa_native.PINNED agree with what is installed."""
    assert (c2pa.__version__, c2pa.sdk_version()) == c2pa_native.PINNED
    assert c2pa_native.fast_path_problem() is None
    assert box_hashed.AVAILABLE and data_hashed.AVAILABLE


async def test_another_c2pa_version_signs_through_the_public_api(
    make_client: MakeClient,
    data_dir: Path,
    fresh_process: list[int],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(c2pa, "__version__", "0.39.0")  # as after `pip install -U c2pa-python`
    with caplog.at_level(logging.WARNING, "imagesvc.provenance"):
        await _keyed_delivery_reads_valid(make_client, data_dir)
    assert fresh_process[0] == 2  # both signatures through Builder.sign
    (line,) = [r.getMessage() for r in caplog.records if OFF in r.getMessage()]  # one line, not one per signature
    assert "0.39.0" in line
    assert "0.39.0" in await _doctor_warns(data_dir)


async def test_a_fast_path_that_raises_falls_back(
    make_client: MakeClient,
    data_dir: Path,
    fresh_process: list[int],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What a renamed private handle does to the fast paths (an AttributeError where they reach it)."""

    def renamed(*_args: Any) -> int:
        raise AttributeError("'Builder' object has no attribute '_handle'")

    monkeypatch.setattr(box_hashed, "_SIGN", renamed)
    monkeypatch.setattr(data_hashed, "_SIGN", renamed)
    with caplog.at_level(logging.WARNING, "imagesvc.provenance"):
        await _keyed_delivery_reads_valid(make_client, data_dir)
    assert fresh_process[0] == 2
    (line,) = [r.getMessage() for r in caplog.records if OFF in r.getMessage()]
    assert "AttributeError" in line and "_handle" in line
    assert "_handle" in await _doctor_warns(data_dir)


def test_a_missing_native_symbol_turns_the_fast_paths_off(fresh_process: list[int]) -> None:
    assert c2pa_native.bind("c2pa_builder_sign_in_some_later_release", []) is None
    problem = c2pa_native.fast_path_problem()
    assert problem is not None and "c2pa_builder_sign_in_some_later_release" in problem
