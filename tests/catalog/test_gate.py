"""The catalog gate (``imagesvc.catalog.gate``): a call past the deadline is a 503 at the deadline, the catalog is
then refused at once (no thread waits behind a hung one) until its probe returns, and the gate's threads are its own,
so a saturated default executor delays no catalog read. On a real SQLite catalog; the PostgreSQL side is
tests/test_catalog_hangs.py."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from imagesvc.catalog import Catalog
from imagesvc.catalog.gate import AsyncCatalog
from imagesvc.errors import Unavailable
from imagesvc.settings import SettingsError, load_settings

BOUND = 10.0  # seconds only a hang reaches


def _wait(catalog: Any, release: threading.Event) -> None:
    release.wait(BOUND)


async def test_a_call_past_the_deadline_is_refused_then_every_call_at_once_until_the_catalog_answers(
    tmp_path: Path,
) -> None:
    catalog = Catalog(tmp_path / "catalog.sqlite3", deadline=0.3)
    db, release = AsyncCatalog(catalog), threading.Event()
    try:
        started = time.monotonic()
        with pytest.raises(Unavailable) as caught:
            await db.call(_wait, release)
        assert caught.value.status == 503 and caught.value.code == "unavailable"
        assert 0.3 <= time.monotonic() - started < BOUND
        assert catalog.gate.hung
        started = time.monotonic()
        for _ in range(50):  # refused without a thread: none queues behind the stuck one
            with pytest.raises(Unavailable):
                await db.counts()
        assert time.monotonic() - started < 0.3
        assert not await catalog.gate.answers()  # readiness says so too
        release.set()  # the stuck call returns; the probe queued behind it runs and the catalog is back
        deadline = time.monotonic() + BOUND
        while catalog.gate.hung:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        assert (await db.counts())["books"] == 0
        assert await catalog.gate.answers()
    finally:
        release.set()
        catalog.close()


async def test_a_saturated_default_executor_delays_no_catalog_read(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "catalog.sqlite3")
    release = threading.Event()
    loop = asyncio.get_running_loop()
    busy = [loop.run_in_executor(None, release.wait, BOUND) for _ in range(64)]  # every default thread taken
    try:
        assert (await asyncio.wait_for(AsyncCatalog(catalog).counts(), BOUND))["books"] == 0
    finally:
        release.set()
        await asyncio.gather(*busy)
        catalog.close()


def test_the_deadline_is_at_most_two_seconds() -> None:
    assert load_settings({"IMAGESVC_CATALOG_DEADLINE": "2"}).catalog_deadline == 2.0
    for wrong in ("2.5", "0", "-1"):
        with pytest.raises(SettingsError, match="IMAGESVC_CATALOG_DEADLINE"):
            load_settings({"IMAGESVC_CATALOG_DEADLINE": wrong})
    with pytest.raises(ValueError, match="at most 2"):
        Catalog(":memory:", deadline=3)
