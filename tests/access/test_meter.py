"""Usage meter and failure contract on every real backend: daily rows, and an unusable store reported as such."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagesvc.access import AccessUnavailable, Reservation, make_access
from imagesvc.access.redis import RedisAccess
from imagesvc.access.sqlite import SqliteAccess
from imagesvc.errors import Unavailable
from imagesvc.settings import load_settings
from tests.access.conftest import MakeAccess
from tests.servers import refused_port

T0 = 1_800_000_000.0  # 2027-01-15 08:00 UTC
DAY = 86_400


async def test_daily_usage_counts_committed_deliveries_per_day_and_pool(make_access: MakeAccess) -> None:
    access = make_access()
    for at, pool, units in ((T0 - DAY, "text", 25), (T0, "text", 10), (T0, "images", 1), (T0 + 60, "images", 1)):
        got = await access.reserve("key:k9", pool, units, None, at)
        assert isinstance(got, Reservation)
        assert await access.commit(got, now=at)
    refunded = await access.reserve("key:k9", "images", 1, None, T0)
    assert isinstance(refunded, Reservation) and await access.refund(refunded)
    await access.record("key:k9", "text", now=T0)  # a request that delivered no pages
    assert await access.daily_usage("key:k9", 90, T0) == [
        {"date": "2027-01-14", "pool": "text", "requests": 1, "units": 25},
        {"date": "2027-01-15", "pool": "images", "requests": 2, "units": 2},
        {"date": "2027-01-15", "pool": "text", "requests": 2, "units": 10},
    ]
    assert [row["date"] for row in await access.daily_usage("key:k9", 1, T0)] == ["2027-01-15"] * 2
    assert await make_access().daily_usage("key:other", 90, T0) == []
    with pytest.raises(ValueError, match="days"):
        await access.daily_usage("key:k9", 91, T0)


async def test_redis_refused_is_unavailable() -> None:
    with refused_port() as port:
        access = RedisAccess(f"redis://:s3cret@127.0.0.1:{port}/0")
        try:
            with pytest.raises(Unavailable) as caught:
                await access.reserve("ip:192.0.2.1", "images", 1, 500)
            assert isinstance(caught.value, AccessUnavailable)
            assert caught.value.status == 503 and caught.value.headers["Retry-After"]
            # The public message names the role, never the host; the log's detail names the host, never the password.
            assert "127.0.0.1" not in caught.value.message and "127.0.0.1" in caught.value.detail
            assert "s3cret" not in caught.value.detail
            with pytest.raises(AccessUnavailable):
                await access.hit("ip:192.0.2.1", 60, 3600)
        finally:
            await access.close()


async def test_unusable_sqlite_file_is_unavailable(tmp_path: Path) -> None:
    (tmp_path / "access.sqlite3").mkdir()  # a folder where the file should be
    access = SqliteAccess(tmp_path / "access.sqlite3")
    try:
        with pytest.raises(AccessUnavailable, match=r"access\.sqlite3"):
            await access.reserve("ip:192.0.2.1", "images", 1, 500)
    finally:
        await access.close()


async def test_settings_pick_the_backend(tmp_path: Path, redis_server: str) -> None:
    local = make_access(load_settings({}, data_dir=tmp_path))
    shared = make_access(load_settings({"IMAGESVC_ACCESS_BACKEND": "redis", "IMAGESVC_REDIS_URL": redis_server}))
    try:
        assert isinstance(local, SqliteAccess) and local.path == tmp_path / "access.sqlite3"
        assert isinstance(shared, RedisAccess)
        for backend in (local, shared):
            assert isinstance(await backend.reserve("ip:192.0.2.8", "images", 1, 1), Reservation)
        assert (tmp_path / "access.sqlite3").exists()
    finally:
        await local.close()
        await shared.close()
