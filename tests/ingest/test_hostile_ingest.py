"""Hostile masters through the real ingest: each page gets its outcome, the rest of the book goes in, refusals are
reported with their file and a public reason word, on every run, and the CLI says so in its exit status."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from imagesvc.catalog import Catalog
from imagesvc.imaging.refusals import NOT_HELD, REASONS
from imagesvc.imaging.tiers import fit_size
from imagesvc.storage.local import LocalStore
from tests.imaging import hostile
from tests.imaging.awkward import encode, page_image
from tests.library import run_ingest, settings_for

MAX_PIXELS = 60_000_000
IMAGESVC = str(Path(sys.executable).with_name("imagesvc"))


def _book(slug: str, pages: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "slug": slug,
        "title": "Hostile masters",
        "author": "Generated for tests",
        "language": "Latin",
        "attribution": {"institution": "Test Library", "item_url": "https://example.org/item/1"},
        "pages": pages,
    }


def _write_library(root: Path, masters: list[tuple[str, bytes]], *, no_image: bool = True) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    pages = []
    for number, (name, data) in enumerate(masters, start=1):
        (root / name).write_bytes(data)
        pages.append({"number": number, "image": name})
    if no_image:
        pages.append({"number": len(pages) + 1, "image": None})
    manifest = root / "manifest.json"
    manifest.write_text(json.dumps({"version": 1, "books": [_book("hostile", pages)]}))
    return manifest


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("hostile")
    cases = list(hostile.cases(MAX_PIXELS))
    manifest = _write_library(root / "src", [(f"case-{i:03d}.bin", c.data) for i, c in enumerate(cases)])
    settings = settings_for(root / "data", max_image_pixels=MAX_PIXELS)
    first = run_ingest(manifest, settings)
    second = run_ingest(manifest, settings)
    return {"cases": cases, "manifest": manifest, "data": root / "data", "first": first, "second": second}


def test_every_hostile_page_gets_its_outcome_and_the_rest_goes_in(hostile_run: dict[str, Any]) -> None:
    catalog = Catalog(hostile_run["data"] / "catalog.sqlite3")
    try:
        book = catalog.find_book("hostile")
        pages = {p["number"]: p for p in catalog.pages(book["id"])}
        for number, case in enumerate(hostile_run["cases"], start=1):
            page = pages[number]
            if case.reason is not None:
                assert page["image_unavailable"] == 1, case.name
                assert page["unavailable_reason"] == case.reason, case.name
                continue
            assert page["image_unavailable"] == 0, case.name
            assert (page["width"], page["height"]) == case.size, case.name
            tiers = catalog.renditions([page["id"]])[page["id"]]
            # The clean copies' sizes; a public tier is as large or larger (a mark strip outside the page).
            assert (tiers["full"]["clean_width"], tiers["full"]["clean_height"]) == case.size, case.name
            for tier, longest in (("display", 2000), ("thumb", 300)):
                row = tiers[tier]
                assert (row["clean_width"], row["clean_height"]) == fit_size(*case.size, longest), case.name
                assert row["width"] >= row["clean_width"] and row["height"] >= row["clean_height"], case.name
        assert pages[len(hostile_run["cases"]) + 1]["unavailable_reason"] == NOT_HELD
        assert {p["unavailable_reason"] for p in pages.values()} <= {None, NOT_HELD, *REASONS}
        mpo = next(i for i, c in enumerate(hostile_run["cases"], start=1) if c.fmt == "MPO")
        assert pages[mpo]["master_key"].endswith(".jpg")
    finally:
        catalog.close()


def test_refusals_name_the_file_and_a_rerun_still_reports_them(hostile_run: dict[str, Any]) -> None:
    first, second = hostile_run["first"], hostile_run["second"]
    expected = {i for i, c in enumerate(hostile_run["cases"], start=1) if c.reason is not None}
    assert {r["page"] for r in first.refused} == expected
    for refusal in first.refused:
        assert refusal["file"].endswith(f"case-{refusal['page'] - 1:03d}.bin")
        assert refusal["error"].startswith(refusal["file"])
        assert "OSError" not in refusal["error"] and "Pillow" not in refusal["error"]
    assert second.books_skipped == 1 and second.pages_rendered == 0
    assert {r["page"] for r in second.refused} == expected, "a rerun reported fewer refused pages than remain"


def test_objects_written_counts_every_object(hostile_run: dict[str, Any]) -> None:
    store = LocalStore(hostile_run["data"] / "store")

    async def count() -> int:
        return sum([1 async for _ in store.list("")])

    assert hostile_run["first"].objects_written == asyncio.run(count())
    assert hostile_run["second"].objects_written == 0


def test_a_page_over_the_memory_budget_is_refused_and_the_rest_goes_in(tmp_path: Path) -> None:
    small, large = encode(page_image(400, 300), quality=80), encode(page_image(3000, 2000), quality=80)
    manifest = _write_library(tmp_path / "src", [("small.jpg", small), ("large.jpg", large)], no_image=False)
    # With 64 MiB for the worker itself, 3000x2000 at 12 bytes a pixel needs ~139 MB, 400x300 ~69 MB: a 100 MB budget
    # takes only the small one.
    summary = run_ingest(manifest, settings_for(tmp_path / "data", ingest_memory_bytes=100_000_000))
    assert [(r["page"], r["reason"]) for r in summary.refused] == [(2, "too_large")]
    assert "IMAGESVC_INGEST_MEMORY_BYTES" in summary.refused[0]["error"]
    assert summary.pages_rendered == 1


def test_the_cli_exits_3_when_pages_were_refused_and_says_so_in_its_help(tmp_path: Path) -> None:
    good = encode(page_image(400, 300), quality=80)
    lie = hostile.lying_header("JPEG", (800, 600), (1600, 1200))
    manifest = _write_library(tmp_path / "src", [("good.jpg", good), ("lie.jpg", lie)], no_image=False)
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGESVC_")}
    env |= {"IMAGESVC_DATA_DIR": str(tmp_path / "data"), "IMAGESVC_WORKERS": "1"}
    for _ in range(2):  # the rerun skips the book and still says the page is refused
        done = subprocess.run([IMAGESVC, "ingest", str(manifest), "--quiet"], env=env, capture_output=True, timeout=120)
        assert done.returncode == 3, done.stderr.decode()
        assert str(tmp_path / "src" / "lie.jpg") in done.stderr.decode()
        assert "1 refused" in done.stdout.decode()
    helped = subprocess.run([IMAGESVC, "ingest", "--help"], env=env, capture_output=True, check=True)
    assert "3 finished, but some pages were refused" in " ".join(helped.stdout.decode().split())
