"""``imagesvc download`` against a live server: the whole demo library into a BagIt bag, killed halfway and resumed,
nothing verified fetched twice, the bag valid, every image carrying credentials that name the key."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import bagit
import pytest
from aiohttp.test_utils import TestServer

from imagesvc.app import build_app
from imagesvc.bulk.pacing import Pacer, parse_limits
from imagesvc.provenance.manifests import DELIVERY_LABEL
from imagesvc.provenance.sign import read_credentials
from tests.http.keys import new_key
from tests.library import copy_library, settings_for


@pytest.fixture
async def served(demo_library: dict, tmp_path: Path) -> AsyncIterator[tuple[str, Path]]:
    data = copy_library(demo_library["data"], tmp_path / "data")
    server = TestServer(build_app(settings_for(data)), host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("/api")), data
    await server.close()


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("IMAGESVC_")}


async def _download(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "imagesvc.cli", "download", *args, env=_env(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


def _journal(dest: Path) -> list[dict]:
    path = dest / ".imagesvc-download" / "journal.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


async def test_a_full_key_downloads_the_library_killed_halfway_and_resumed_into_a_valid_bag(
    served: tuple[str, Path], tmp_path: Path
) -> None:
    url, data = served
    key, key_id = new_key(data, "full")
    dest = tmp_path / "bag"
    args = ("--all", "--dest", str(dest), "--url", url, "--key", key, "--pages", "1", "--concurrency", "1")
    first = await _download(*args)
    for _ in range(3000):  # kill it once some pages are on disk, long before all 27
        if len([e for e in _journal(dest) if "path" in e]) >= 3 or first.returncode is not None:
            break
        await asyncio.sleep(0.01)
    first.send_signal(signal.SIGKILL)
    await first.wait()
    before = {e["path"] for e in _journal(dest) if "path" in e}
    assert 3 <= len(before) < 27, "the first run was killed halfway"
    second = await _download(*args, "--json")
    out, err = await asyncio.wait_for(second.communicate(), timeout=300)
    summary = json.loads(out)
    assert second.returncode == 0, err.decode()
    assert summary["valid"] and summary["failures"] == [] and summary["requests_refused"] == 0
    assert summary["images"] == summary["expected"] == 27 and summary["image_unavailable"] == 1
    paths = [e["path"] for e in _journal(dest) if "path" in e]
    assert len(paths) == len(set(paths)) == 27  # nothing recorded (complete and verified) was fetched again
    bagit.Bag(str(dest)).validate()
    images = sorted((dest / "data").rglob("*.jpg"))
    assert len(images) == 27
    for path in images[::5]:
        found = read_credentials(path.read_bytes(), data / "c2pa" / "root.pem")
        assert found.state == "Trusted", found.failures
        assert found.assertion(DELIVERY_LABEL)["key_ref"] == key_id


async def test_failures_are_listed_with_a_non_zero_exit(served: tuple[str, Path], tmp_path: Path) -> None:
    url, data = served
    key, _ = new_key(data, "domain")
    proc = await _download("demo-speculum-fornacum", "--clean", "--dest", str(tmp_path / "b"), "--url", url,
                           "--key", key, "--json")  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 1
    summary = json.loads(out)
    assert summary["failures"] and "403" in summary["failures"][0]
    assert "failed:" in err.decode()


async def test_the_pacer_keeps_inside_the_window_and_honours_retry_after() -> None:
    now = [0.0]
    said: list[str] = []
    pacer = Pacer(max_wait=5, say=said.append, clock=lambda: now[0])
    await pacer.wait()
    pacer.observe({"RateLimit-Policy": '"requests";q=3;w=60', "RateLimit": '"requests";r=2;t=60'}, 200)
    await pacer.wait()
    await pacer.wait()
    assert pacer.delay() > 0  # a fourth would not fit the window
    assert len(pacer.starts) == 3 and pacer.quota == 3
    assert parse_limits('"images";r=4, "requests";r=0;t=12') == {"images": {"r": 4}, "requests": {"r": 0, "t": 12}}
    pacer.observe({"Retry-After": "600"}, 429)
    assert pacer.blocked_until == 5 and said and "capped" in said[0]  # Retry-After capped, and said on screen
