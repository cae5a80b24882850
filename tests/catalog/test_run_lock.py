"""One `imagesvc index` at a time per catalog (imagesvc/catalog/run_lock.py), on SQLite and PostgreSQL.

Two index runs at once could each prune the other's freshly uploaded files before its catalog row names them. A
second run is refused at once with who holds the lock; a killed holder frees it; the lock writes nothing to the
catalog, so nodes following the change stamp see no change while it is held.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from imagesvc.catalog.run_lock import RunLocked, exclusive_run
from tests.catalog.conftest import Backend
from tests.test_ingest_kills import IMAGESVC, ingest_env

HOLD = """
import sys, time
from imagesvc.catalog.backends import open_catalog
from imagesvc.catalog.run_lock import exclusive_run
from imagesvc.settings import load_settings
catalog = open_catalog(load_settings())
with exclusive_run(catalog, "index"):
    print("held", flush=True)
    time.sleep(600)
"""


def _env(backend: Backend, data: Path) -> dict[str, str]:
    return ingest_env(data, IMAGESVC_TEXT_MODEL="off", IMAGESVC_LOG_LEVEL="warning", **backend.settings)


def _holder(backend: Backend, data: Path) -> subprocess.Popen[str]:
    """Another process holding the index lock of ``backend``'s catalog (it says ``held`` once it does)."""
    if backend.dialect == "sqlite":  # the settings name the data dir; the catalog file lies in it
        backend.open().close()
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD],
        env=_env(backend, data) | {"PYTHONPATH": os.getcwd()},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def _take(backend: Backend, wait: float = 10.0) -> None:
    """Take and release the lock, retrying for ``wait`` s while a dead holder's lock is being freed."""
    deadline = time.monotonic() + wait
    while True:
        try:
            with exclusive_run(backend.open(), "index"):
                return
        except RunLocked:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.fixture
def data(backend: Backend, tmp_path: Path) -> Path:
    """The data dir whose settings ``backend`` names (SQLite: its catalog file is ``catalog.sqlite3`` there)."""
    return tmp_path


def test_a_second_holder_is_refused_until_the_first_lets_go(backend: Backend) -> None:
    first, second = backend.open(), backend.open()
    stamp = second.change_stamp()
    with exclusive_run(first, "index"):
        with (
            pytest.raises(RunLocked, match=r"another `imagesvc index` is running \(.*pid \d+"),
            exclusive_run(second, "index"),
        ):
            pytest.fail("two holders at once")
        assert second.change_stamp() == stamp  # holding it wrote nothing nodes would follow
        with exclusive_run(second, "ingest"):  # another name is another lock
            pass
    with exclusive_run(second, "index"):
        pass


def test_a_killed_holder_frees_the_lock(backend: Backend, data: Path) -> None:
    proc = _holder(backend, data)
    try:
        with pytest.raises(RunLocked), exclusive_run(backend.open(), "index"):
            pass
    finally:
        _stop(proc)
    _take(backend)


def test_imagesvc_index_is_refused_while_another_run_holds_the_lock(backend: Backend, data: Path) -> None:
    proc = _holder(backend, data)
    try:
        done = subprocess.run(
            [IMAGESVC, "index", "--quiet"], env=_env(backend, data), capture_output=True, text=True, timeout=120
        )
    finally:
        _stop(proc)
    assert done.returncode == 3, done.stderr[-2000:]
    assert "another `imagesvc index` is running" in done.stderr
    assert "Traceback" not in done.stderr
    after = subprocess.run(
        [IMAGESVC, "index", "--quiet"], env=_env(backend, data), capture_output=True, text=True, timeout=300
    )
    assert after.returncode == 0, after.stderr[-2000:]
