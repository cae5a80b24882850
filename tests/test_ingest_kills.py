"""``imagesvc ingest`` SIGKILLed at random moments, then rerun: the store and catalog equal one clean ingest's.

Each trial starts a real ``imagesvc ingest`` (with its process pool) in its own process group, kills the whole group
after a random delay, reruns ingest to completion, then lists and hashes every object and compares them, and the
catalog rows, with a clean reference ingest. Most kills wait for an event (the store holding a chosen number of
objects), not a clock, so what the trials cover does not depend on the machine's speed. The seed is fixed and printed
with every failure; set ``KILL_SEED`` to try others.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from imagesvc.catalog import Catalog
from imagesvc.imaging.xmp import strip_c2pa
from imagesvc.provenance.credentials import ensure_local_ca
from imagesvc.storage import ObjectStore
from imagesvc.storage.local import LocalStore
from imagesvc.storage.s3 import S3Config, S3Store
from tests.servers import S3Server, descendants

IMAGESVC = str(Path(sys.executable).with_name("imagesvc"))
TABLES = ("books", "pages", "renditions", "illustrations", "collections", "collection_items")
VOLATILE = ("ingested_at", "updated_at", "created_at")  # wall-clock columns differ between two clean runs
SEED = int(os.environ.get("KILL_SEED", "20261122"))


def small_manifest(demo_manifest: Path, out: Path) -> Path:
    """One six-page demo book, the broken-scans book and a one-item collection: a ~2 s ingest."""
    demo = json.loads(demo_manifest.read_text())
    broken = json.loads((demo_manifest.parent / "broken" / "broken-manifest.json").read_text())
    book = next(b for b in demo["books"] if b["slug"] == "demo-sefer-maarekhet-ha-kokhavim")
    for page in book["pages"]:
        if page.get("image"):
            page["image"] = str(demo_manifest.parent / page["image"])
    for page in broken["books"][0]["pages"]:
        page["image"] = str(demo_manifest.parent / "broken" / page["image"])
    item = {"book": book["slug"], "page": 1, "index": 0}
    collection = {"slug": "small-heavens", "title": "Small heavens", "description": "One plate.", "items": [item]}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"version": 1, "books": [book, broken["books"][0]], "collections": [collection]}))
    return out


def ingest_env(data: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGESVC_")}
    return (
        env
        | {"IMAGESVC_DATA_DIR": str(data), "IMAGESVC_WORKERS": "2", "IMAGESVC_SITE_URL": "https://x.example"}
        | _SIGNING
        | extra
    )


# One C2PA signing chain for every run (set by the reference fixture), so signed files have equal sizes everywhere.
_SIGNING: dict[str, str] = {}


def run(manifest: Path, env: dict[str, str]) -> None:
    done = subprocess.run([IMAGESVC, "ingest", str(manifest), "--quiet"], env=env, capture_output=True, timeout=120)
    assert done.returncode == 3, done.stderr.decode()[-2000:]  # 3: finished; the broken-scans book's pages refused


def _written(store: Path) -> int:
    return sum(1 for p in store.rglob("*") if not p.name.startswith(".") and p.is_file()) if store.exists() else 0


def timed_run(manifest: Path, env: dict[str, str], store: Path) -> tuple[float, float]:
    """A clean run, watched: seconds until its first object was written, and until it ended."""
    start = time.monotonic()
    proc = subprocess.Popen([IMAGESVC, "ingest", str(manifest), "--quiet"], env=env, stdout=subprocess.DEVNULL)
    first = 0.0
    while proc.poll() is None:
        if not first and _written(store):
            first = time.monotonic() - start
        time.sleep(0.02)
    assert proc.returncode == 3  # finished, with the broken-scans book's pages refused
    total = time.monotonic() - start
    return first or total, total


def kill_midway(manifest: Path, env: dict[str, str], delay: float = 0.0, after: tuple[Path, int] | None = None) -> bool:
    """Start ingest and SIGKILL its process group ``delay`` s after the start, or as soon as the local store
    ``after[0]`` holds ``after[1]`` objects; True if it was still running then."""
    proc = subprocess.Popen(
        [IMAGESVC, "ingest", str(manifest), "--quiet"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    while after is not None and proc.poll() is None and _written(after[0]) < after[1]:
        time.sleep(0.01)
    if delay:
        time.sleep(delay)
    running = proc.poll() is None
    if running:
        os.killpg(proc.pid, signal.SIGKILL)  # the pool's workers die with it, as in an OOM kill of the container
    proc.wait()
    return running


def objects(store: ObjectStore) -> dict[str, str]:
    """Every object's key and the sha256 of its bytes, checked against its listed size."""

    async def walk() -> dict[str, str]:
        out = {}
        try:
            async for info in store.list(""):
                data = (await store.get(info.key)).data
                assert len(data) == info.size, info.key
                # C2PA manifests carry random salts: public tiers are compared without theirs (keys address that).
                out[info.key] = hashlib.sha256(strip_c2pa(data) if info.key.startswith("pub/") else data).hexdigest()
        finally:
            await store.close()
        return out

    return asyncio.run(walk())


def rows(data: Path) -> dict[str, list[dict[str, Any]]]:
    catalog = Catalog(data / "catalog.sqlite3")
    try:
        out = {}
        for table in TABLES:
            found = catalog.query_all(f"SELECT * FROM {table} ORDER BY 1, 2")
            out[table] = [{k: v for k, v in r.items() if k not in VOLATILE} for r in found]
        return out
    finally:
        catalog.close()


def stray_files(root: Path, keys: set[str]) -> list[str]:
    """Files in a local store that are neither an object nor the metadata sidecar of one.

    Hidden ``.tmp-*`` files that a kill left mid-write are not counted: no listing or read ever shows them (a known
    gap: nothing sweeps them yet, see docs/operations.md)."""
    stray = []
    for path in root.rglob("*"):
        if not path.is_file() or path.name.startswith(".tmp-"):
            continue
        rel = path.relative_to(root).as_posix()
        sidecar_of = (path.parent / path.name[1:].removesuffix(".meta")).relative_to(root).as_posix()
        if rel not in keys and not (path.name.endswith(".meta") and sidecar_of in keys):
            stray.append(rel)
    return stray


@pytest.fixture(scope="module")
def reference(demo_library: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A clean ingest of the small manifest: its objects and catalog rows."""
    root = tmp_path_factory.mktemp("kills")
    ca = ensure_local_ca(root / "c2pa", "imagesvc demo library")
    _SIGNING.update(IMAGESVC_C2PA_CERT_CHAIN=str(ca.chain), IMAGESVC_C2PA_PRIVATE_KEY=str(ca.key))
    manifest = small_manifest(demo_library["manifest"], root / "small.json")
    first, total = timed_run(manifest, ingest_env(root / "ref"), root / "ref" / "store")
    return {
        "manifest": manifest,
        "objects": objects(LocalStore(root / "ref" / "store")),
        "rows": rows(root / "ref"),
        "first_write": first,  # seconds from start to the first object: start-up, parsing, first renders
        "seconds": total,
    }


@pytest.mark.slow
def test_twenty_random_kills_then_a_rerun_converge(reference: dict[str, Any], tmp_path: Path) -> None:
    rng = random.Random(SEED)
    total = len(reference["objects"])
    for trial in range(20):
        data = tmp_path / f"trial-{trial}"
        env = ingest_env(data)
        where = f"trial {trial}, KILL_SEED={SEED}"
        if trial < 5:  # before the first object: start-up, parsing, the first renders
            kill_midway(reference["manifest"], env, rng.uniform(0.05, reference["first_write"]))
        else:  # in the write phase, where a kill leaves the most half-done work: once the store holds n objects
            n = rng.randint(1, max(1, total // 2))
            assert kill_midway(reference["manifest"], env, after=(data / "store", n)), f"ingest ended first ({where})"
            after_kill = objects(LocalStore(data / "store"))
            assert n <= len(after_kill) < total, f"{len(after_kill)} objects after a kill at {n} ({where})"
        run(reference["manifest"], env)
        found = objects(LocalStore(data / "store"))
        assert found == reference["objects"], where  # no missing, orphaned or corrupt object
        assert rows(data) == reference["rows"], where
        assert stray_files(data / "store", set(found)) == [], where


@pytest.mark.slow
def test_kills_against_s3_converge(reference: dict[str, Any], moto_server: S3Server, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    s3 = {
        "IMAGESVC_STORAGE": "s3",
        "IMAGESVC_S3_ENDPOINT": moto_server.endpoint_url,
        "IMAGESVC_S3_ACCESS_KEY": moto_server.access_key,
        "IMAGESVC_S3_SECRET_KEY": moto_server.secret_key,
        "IMAGESVC_IMAGE_HOST": "https://img.example",
    }
    for trial in range(3):
        bucket = f"kills-{trial}-{SEED}"
        env = ingest_env(tmp_path / f"trial-{trial}", IMAGESVC_S3_BUCKET=bucket, **s3)
        kill_midway(reference["manifest"], env, rng.uniform(reference["first_write"], reference["seconds"]))
        run(reference["manifest"], env)
        config = S3Config(moto_server.endpoint_url, bucket, access_key=moto_server.access_key, secret_key="x")
        assert objects(S3Store(config)) == reference["objects"], f"trial {trial}, KILL_SEED={SEED}"
        assert rows(tmp_path / f"trial-{trial}") == reference["rows"]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_sigkilled_ingest_leaves_no_worker_behind(reference: dict[str, Any], tmp_path: Path) -> None:
    """Only the ingest process is killed (as an OOM killer does): its pool workers and the resource tracker must
    exit by themselves within seconds, not hold memory forever."""
    proc = subprocess.Popen(
        [IMAGESVC, "ingest", str(reference["manifest"]), "--quiet"],
        env=ingest_env(tmp_path / "data"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    children: set[int] = set()
    while proc.poll() is None and time.monotonic() < deadline and len(children) < 2:
        children = descendants(proc.pid)
        time.sleep(0.02)
    assert proc.poll() is None and len(children) >= 2, "ingest ended before its pool started"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in children):
        time.sleep(0.1)
    survivors = [pid for pid in children if _alive(pid)]
    for pid in survivors:  # do not leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert survivors == [], f"{len(survivors)} of {len(children)} child processes outlived the killed ingest"
