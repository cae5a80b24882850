"""Manifest validation: every problem is reported at once, naming the book, the page and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagesvc.catalog import book_id_for
from imagesvc.ingest.manifest import ManifestError, load_manifest


def _book(slug: str = "herbal", **extra: object) -> dict:
    book = {
        "slug": slug,
        "title": "A Herbal",
        "author": "Anon.",
        "language": "Latin",
        "attribution": {"institution": "Demo", "item_url": "https://example.org/item/1"},
        "pages": [
            {
                "number": 1,
                "image": "p1.png",
                "illustrations": [{"bbox": {"x": 0.1, "y": 0.1, "width": 0.5, "height": 0.5}, "type": "woodcut"}],
            },
            {"number": 2, "image": None},
        ],
    }
    book.update(extra)
    return book


def _write(tmp_path: Path, doc: dict) -> Path:
    (tmp_path / "p1.png").write_bytes(b"not read by validation")
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(doc))
    return path


def test_valid_manifest_fills_ids_and_resolves_collections(tmp_path: Path) -> None:
    doc = {
        "version": 1,
        "books": [_book()],
        "collections": [{"slug": "plants", "title": "Plants", "items": [{"book": "herbal", "page": 1, "index": 0}]}],
    }
    manifest = load_manifest(_write(tmp_path, doc))
    book_id = book_id_for("herbal")
    assert manifest.books[0]["id"] == book_id
    assert manifest.collections[0]["item_ids"] == [f"{book_id}-1:0"]


def test_schema_errors_name_book_page_and_field(tmp_path: Path) -> None:
    bad = _book()
    bad["pages"][0]["illustrations"][0]["bbox"]["x"] = 1.5
    bad["year"] = "1550"
    with pytest.raises(ManifestError) as info:
        load_manifest(_write(tmp_path, {"version": 1, "books": [bad]}))
    problems = info.value.problems
    assert any(p.startswith('book "herbal", page 1, field illustrations[0].bbox.x') for p in problems), problems
    assert any(p.startswith('book "herbal", field year') for p in problems), problems
    assert info.value.status == 400


def test_semantic_errors_are_all_listed(tmp_path: Path) -> None:
    book = _book()
    book["pages"].append({"number": 2, "image": "missing.jpg"})
    book["pages"][0]["illustrations"][0]["bbox"].update(x=0.8, width=0.5)
    doc = {
        "version": 1,
        "books": [book, _book()],
        "collections": [{"slug": "c", "title": "C", "items": [{"book": "herbal", "page": 9, "index": 0}]}],
    }
    with pytest.raises(ManifestError) as info:
        load_manifest(_write(tmp_path, doc))
    text = "\n".join(info.value.problems)
    assert 'book "herbal": the slug is used by an earlier book too' in text
    assert 'book "herbal", page 2: the page number appears twice' in text
    assert "field image: no file at" in text
    assert "extends past the page" in text
    assert 'collection "c": no illustration 0 on page 9 of "herbal"' in text


def test_unreadable_manifest(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text("{not json")
    with pytest.raises(ManifestError, match="not valid JSON"):
        load_manifest(path)
    with pytest.raises(ManifestError, match="does not exist"):
        load_manifest(tmp_path / "nope.json")


def test_catalogue_fields_are_checked_and_each_problem_named(tmp_path: Path) -> None:
    good = _book(
        category="botany",
        collection="herbals",
        work_id="anon-herbal",
        edition_key="venice-1499",
        first_translation=True,
        edition_languages=["la", "en"],
        translated_at="2024-05-01",
    )
    assert load_manifest(_write(tmp_path, {"version": 1, "books": [good]})).books[0]["edition_languages"] == [
        "la",
        "en",
    ]
    bad = _book(
        collection="Not A Slug",
        edition_languages=["english"],
        translated_at="May 2024",
        first_translation="yes",
        work_id="has spaces",
    )
    with pytest.raises(ManifestError) as caught:
        load_manifest(_write(tmp_path, {"version": 1, "books": [bad]}))
    fields = " ".join(caught.value.problems)
    for field in ("collection", "edition_languages[0]", "translated_at", "first_translation", "work_id"):
        assert f"field {field}" in fields, field


def test_schema_and_rule_problems_come_in_one_round(tmp_path: Path) -> None:
    """An operator fixing a manifest must not be told about a second batch of problems after fixing the first."""
    book = _book()
    book["year"] = "1550"  # a schema problem
    book["pages"].append({"number": 3, "image": "missing.jpg"})  # a rule problem
    with pytest.raises(ManifestError) as info:
        load_manifest(_write(tmp_path, {"version": 1, "books": [book, _book()]}))
    text = "\n".join(info.value.problems)
    assert 'book "herbal", field year' in text
    assert "field image: no file at" in text
    assert "the slug is used by an earlier book too" in text
