"""``writes.upsert_pages``, the batched page write ingest and the scale generator use, on both backends: a book
written in one batch reads exactly as one written page by page, and a batch that rewrites a book replaces its texts
(in the page index too), illustrations and renditions."""

from __future__ import annotations

import json
from typing import Any

from imagesvc.catalog import Catalog
from imagesvc.catalog import writes as w
from imagesvc.catalog.text_fold import query_words
from tests.catalog.conftest import Backend

TEXTS = {
    1: ("ſecretæ artis inſtrumenta", "the secret art", "בְּרֵאשִׁית בָּרָא"),
    2: ("黃金與水銀相合", "gold and quicksilver", None),
    3: ("كِتَابُ الْكِيمِيَاءِ", "the book of alchemy", "كـــتاب"),
}


def _book(book_id: str) -> dict[str, Any]:
    return {"id": book_id, "slug": f"book-{book_id}", "title": book_id, "author": "Anon.", "language": "Latin",
            "attribution": {"institution": "A library", "item_url": "https://example.org/item"}}  # fmt: skip


def _rows(book_id: str, texts: dict[int, tuple[str | None, ...]], drawn: dict[int, str]) -> list[w.PageRows]:
    """Pages with a rendition each, and an illustration (with a rendition) on the pages in ``drawn``."""
    rows: list[w.PageRows] = []
    for number, (ocr, translation, original) in texts.items():
        pid = f"{book_id}-{number}"
        page = {"id": pid, "book_id": book_id, "number": number, "ocr": ocr, "translation": translation,
                "original": original, "image_unavailable": 0, "unavailable_reason": None, "master_key": f"m/{pid}",
                "master_sha256": "0" * 64, "master_format": "jpeg", "derivation": "d", "width": 10,
                "height": 20}  # fmt: skip
        tier = {"clean_key": f"c/{pid}", "public_key": f"p/{pid}", "width": 1, "height": 2, "bytes": 3,
                "sha256": "f" * 64}  # fmt: skip
        renditions = {pid: {"thumb": tier}}
        illustrations = []
        if number in drawn:
            iid = f"{pid}-i0"
            illustrations.append({"id": iid, "index": 0, "bbox": {"x": 0, "y": 0, "width": 1, "height": 1},
                                  "type": "emblem", "description": drawn[number], "subjects": ["sol"]})  # fmt: skip
            renditions[iid] = {"thumb": {**tier, "clean_key": f"c/{iid}", "public_key": f"p/{iid}"}}
        rows.append((page, renditions, illustrations))
    return rows


def _found(catalog: Catalog, book_id: str, query: str) -> list[int]:
    found, _ = catalog.search_pages(book_id, query_words(query), ["ocr", "translation", "original"], limit=9, offset=0)
    return [number for number, _, _ in found]


def _state(catalog: Catalog, book_id: str) -> dict[str, Any]:
    """What a reader sees of a book, with the book's id taken out of ids and keys."""
    pages = catalog.pages(book_id)
    # an illustration's search number (PostgreSQL, migration 12) is drawn at insert: it differs between books
    ills = [{k: v for k, v in ill.items() if k != "search_num"} for ill in catalog.book_illustrations(book_id)]
    owners = [p["id"] for p in pages] + [i["id"] for i in ills]
    seen = {
        "pages": pages,
        "illustrations": ills,
        "renditions": catalog.renditions(owners),
        "found": {q: _found(catalog, book_id, q) for q in ("secret", "בראשית", "黃金", "الكيمياء", "gold", "sun")},
    }
    return json.loads(json.dumps(seen, ensure_ascii=False).replace(book_id, "B"))  # type: ignore[no-any-return]


def test_a_book_written_in_one_batch_reads_as_one_written_page_by_page(catalog: Catalog, backend: Backend) -> None:
    drawn = {1: "a sun over a furnace", 3: "a dragon"}
    with catalog.transaction() as conn:
        w.upsert_book(conn, _book("page1by1"), "h")
        for page, renditions, illustrations in _rows("page1by1", TEXTS, drawn):
            w.upsert_page(conn, page, renditions, illustrations)
    with catalog.transaction() as conn:
        w.upsert_book(conn, _book("batched1"), "h")
        w.upsert_pages(conn, _rows("batched1", TEXTS, drawn))
    batched = _state(catalog, "batched1")
    assert batched == _state(catalog, "page1by1")
    assert batched["found"] == {"secret": [1], "בראשית": [1], "黃金": [2], "الكيمياء": [3], "gold": [2], "sun": []}
    assert [i["description"] for i in batched["illustrations"]] == ["a sun over a furnace", "a dragon"]
    read = catalog.pages_numbered("batched1", [3, 1, 99])  # the snippets' one read: pages that exist, with text
    assert {n: read[n]["ocr"] for n in read} == {1: TEXTS[1][0], 3: TEXTS[3][0]}
    assert catalog.pages_numbered("batched1", []) == {}


def test_a_batch_rewrite_replaces_texts_illustrations_and_renditions(catalog: Catalog, backend: Backend) -> None:
    with catalog.transaction() as conn:
        w.upsert_book(conn, _book("rewritten"), "h")
        w.upsert_pages(conn, _rows("rewritten", TEXTS, {1: "a sun", 2: "a moon"}))
    changed = {**TEXTS, 2: ("Argentum vivum", "quicksilver", None)}
    with catalog.transaction() as conn:  # page 2 loses its gold and its illustration, page 1's is redrawn
        w.upsert_pages(conn, _rows("rewritten", changed, {1: "a lion"}))
    assert _found(catalog, "rewritten", "黃金") == []
    assert _found(catalog, "rewritten", "gold") == []
    assert _found(catalog, "rewritten", "argentum") == [2]
    assert _found(catalog, "rewritten", "secret") == [1]
    assert [i["description"] for i in catalog.book_illustrations("rewritten")] == ["a lion"]
    assert catalog.illustration("rewritten-2-i0") is None
    assert not any(catalog.renditions(["rewritten-2-i0"]).values())
    table = "pages_fts" if backend.dialect == "sqlite" else "page_texts"
    assert catalog.scalar(f"SELECT count(*) FROM {table}") == 3 + 2 + 3  # one row per text the pages hold now


def test_the_page_list_says_which_texts_each_page_holds_after_rewrites(catalog: Catalog) -> None:
    """The listing (``get_book``, IIIF manifests) reads no text; which texts a page holds follows every write."""
    with catalog.transaction() as conn:
        w.upsert_book(conn, _book("listed"), "h")
        w.upsert_pages(conn, _rows("listed", TEXTS, {}))
    with catalog.transaction() as conn:  # page 1 loses its original, keeps an empty OCR; page 3 goes
        w.upsert_pages(conn, _rows("listed", {1: ("", "the secret art", None)}, {}))
        w.delete_pages_not_in(conn, "listed", [1, 2])
    listed = [(p["number"], p["has_ocr"], p["has_translation"], p["has_original"]) for p in catalog.page_list("listed")]
    assert listed == [(1, 1, 1, 0), (2, 1, 1, 0)]
    stored = catalog.query_all(
        "SELECT number, ocr IS NOT NULL AS o, translation IS NOT NULL AS t, original IS NOT NULL AS g FROM pages"
        " WHERE book_id = ? ORDER BY number",
        ("listed",),
    )
    assert listed == [(r["number"], int(r["o"]), int(r["t"]), int(r["g"])) for r in stored]
    assert catalog.page_list("no-such-book") == []
