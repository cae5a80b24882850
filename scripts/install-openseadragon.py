"""Install OpenSeadragon, the reading page's deep-zoom viewer (~1 MB), for `make run`: no npm needed.

The version and its integrity hash come from viewer/package-lock.json (the same pin `npm ci` installs for the tests);
the tarball comes from the npm registry (``NPM_CONFIG_REGISTRY`` or registry.npmjs.org), is checked against that
hash, and its files go where npm would put them (viewer/node_modules/openseadragon), which the app serves under
/viewer/. Idempotent; without the network it says so and exits 0 (reading pages then say deep zoom is off).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "viewer" / "package-lock.json"
TARGET = ROOT / "viewer" / "node_modules" / "openseadragon"
MAX_BYTES = 20 * 1024 * 1024  # the 6.x tarball is ~1 MB


def pinned() -> tuple[str, str]:
    """OpenSeadragon's version and its ``sha512-...`` integrity, as the lock file pins them."""
    entry = json.loads(LOCK.read_text())["packages"]["node_modules/openseadragon"]
    return entry["version"], entry["integrity"]


def main() -> int:
    version, integrity = pinned()
    stamp = TARGET / f".installed-{version}"
    if stamp.is_file():
        print(f"install-openseadragon: {version} present")
        return 0
    registry = os.environ.get("NPM_CONFIG_REGISTRY", "https://registry.npmjs.org").rstrip("/")
    url = f"{registry}/openseadragon/-/openseadragon-{version}.tgz"
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            data = response.read(MAX_BYTES + 1)
    except OSError as exc:
        print(f"install-openseadragon: cannot fetch {url} ({exc}); reading pages will have no deep zoom")
        return 0
    algorithm, _, expected = integrity.partition("-")
    if (
        len(data) > MAX_BYTES
        or algorithm != "sha512"
        or base64.b64encode(hashlib.sha512(data).digest()).decode() != expected
    ):
        print(f"install-openseadragon: {url} does not match the integrity pinned in {LOCK.name}", file=sys.stderr)
        return 1
    staging = TARGET.with_name(".openseadragon-staging")
    shutil.rmtree(staging, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        archive.extractall(staging, filter="data")  # refuses links out, absolute names and special files
    shutil.rmtree(TARGET, ignore_errors=True)
    (staging / "package").rename(TARGET)
    shutil.rmtree(staging, ignore_errors=True)
    stamp.touch()
    print(f"install-openseadragon: installed {version} into {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
