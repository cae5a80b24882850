"""A library as many manifests (files or folders of per-book manifests): checked whole first, every problem of every
file named at once, then ingested one manifest at a time through ``imagesvc ingest``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from imagesvc.catalog import Catalog
from imagesvc.catalog.text_fold import query_words
from imagesvc.cli import main


def _book(slug: str, words: str) -> dict[str, Any]:
    return {
        "slug": slug,
        "title": f"Book {slug}",
        "author": "Anon.",
        "language": "Latin",
        "attribution": {"institution": "Demo", "item_url": f"https://example.org/{slug}"},
        "pages": [{"number": n, "image": None, "ocr": f"{words} {n}", "translation": f"page {n}"} for n in (1, 2)],
    }


def _write(path: Path, *books: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "books": list(books)}))
    return path


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("IMAGESVC_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def test_a_folder_of_per_book_manifests_and_a_file_ingest_as_one_library(
    tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(tmp_path / "books" / "a.json", _book("alpha", "aurum"))
    _write(tmp_path / "books" / "nested" / "b.json", _book("beta", "argentum"))
    single = _write(tmp_path / "gamma.json", _book("gamma", "ferrum"))
    assert main(["ingest", str(tmp_path / "books"), str(single), "--quiet", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["books"], summary["pages"]) == (3, 6)
    catalog = Catalog(data_dir / "catalog.sqlite3")
    try:
        assert [b["slug"] for b in catalog.query_all("SELECT slug FROM books ORDER BY slug")] == [
            "alpha", "beta", "gamma"
        ]  # fmt: skip
        beta = catalog.find_book("beta")
        assert beta is not None
        assert catalog.search_pages(beta["id"], query_words("argentum"), ["ocr"], limit=5, offset=0)[1] == 2
    finally:
        catalog.close()


def test_every_problem_of_every_manifest_is_named_and_nothing_is_ingested(
    tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = _write(tmp_path / "lib" / "1-good.json", _book("alpha", "aurum"))
    broken = _book("beta", "x")
    del broken["title"]
    _write(tmp_path / "lib" / "2-broken.json", broken)
    _write(tmp_path / "lib" / "3-again.json", _book("alpha", "again"))
    (tmp_path / "lib" / "4-not-json.json").write_text("{")
    assert main(["ingest", str(tmp_path / "lib"), "--quiet", "--json"]) == 1
    err = json.loads(capsys.readouterr().out or "{}") or {}
    text = json.dumps(err)
    assert "2-broken.json" in text and "title" in text
    assert "3-again.json" in text and str(good) in text  # the slug given twice names both files
    assert "4-not-json.json" in text and "not valid JSON" in text
    catalog = Catalog(data_dir / "catalog.sqlite3")
    try:
        assert catalog.query_all("SELECT id FROM books") == []
    finally:
        catalog.close()


def test_an_empty_folder_is_a_clear_error(tmp_path: Path, data_dir: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["ingest", str(tmp_path / "empty"), "--quiet"]) == 1
