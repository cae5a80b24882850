"""`IMAGESVC_FAINT_MARK=true` then `imagesvc marks rebake`: the stored public tiers get the faint mark, signed anew."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from imagesvc.catalog import Catalog
from imagesvc.provenance.sign import read_credentials
from tests.ingest.test_rebake import _rebake
from tests.library import copy_library, settings_for


def _display(data: Path, slug: str, number: int) -> bytes:
    catalog = Catalog(data / "catalog.sqlite3")
    try:
        page = catalog.page(catalog.find_book(slug)["id"], number)
        key = catalog.renditions([page["id"]])[page["id"]]["display"]["public_key"]
    finally:
        catalog.close()
    return (data / "store" / key).read_bytes()


def _pixels(jpeg: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(jpeg)).convert("L"), dtype=np.float64)


def test_rebake_applies_the_faint_mark_setting(demo_library: dict[str, Any], tmp_path: Path) -> None:
    data = copy_library(demo_library["data"], tmp_path / "data")
    slug = "demo-speculum-fornacum"
    before = _display(data, slug, 2)
    _rebake(settings_for(data, faint_mark=True), [slug])
    after = _display(data, slug, 2)
    top = int(_pixels(before).shape[0] * 0.85)
    changed = np.abs(_pixels(after)[:top] - _pixels(before)[:top]) > 12
    assert changed.mean() > 0.01  # the page above the band now carries the mark
    assert read_credentials(after, data / "c2pa" / "root.pem").state == "Trusted"
