"""The catalog protocol, run on both backends (``backend`` fixture: SQLite and PostgreSQL): what ingest writes is
what the service reads, the filters and orders of the catalogue browser agree, text search finds the same
illustrations, keys work, withdrawals hide at once, and each backend tells a reader that another wrote."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from typing import Any

import pytest

from imagesvc.catalog import Catalog, dataset, illustration_id, page_id
from imagesvc.catalog import writes as w
from imagesvc.catalog.api_keys import create_key, list_keys, lookup_key, revoke_key
from imagesvc.catalog.library import BookFilters, author_name, query_books
from imagesvc.catalog.schema import SCHEMA_VERSION
from imagesvc.catalog.text_fold import query_words
from imagesvc.search.text import matching_ids, text_search
from tests.catalog.conftest import Backend


def book(n: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"{n:016x}",
        "slug": f"book-{n}",
        "title": extra.pop("title", f"Book {n}"),
        "author": extra.pop("author", "Anon"),
        "language": "Latin",
        "attribution": {"institution": extra.pop("institution", "Bibliotheca"), "item_url": "https://x.example/1"},
        **extra,
    }


def page(book_id: str, number: int, **extra: Any) -> dict[str, Any]:
    row = {
        "id": page_id(book_id, number),
        "book_id": book_id,
        "number": number,
        "ocr": f"ocr of page {number}",
        "translation": None,
        "original": None,
        "image_unavailable": 0,
        "unavailable_reason": None,
        "master_key": f"masters/{book_id}/{number}",
        "master_sha256": "0" * 64,
        "master_format": "jpeg",
        "derivation": "d1",
        "width": 100,
        "height": 150,
    }
    return row | extra


def illus(book_id: str, number: int, index: int, description: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": illustration_id(book_id, number, index),
        "index": index,
        "bbox": {"x": 0.1, "y": 0.2, "width": 0.3, "height": 0.4},
        "type": extra.pop("type", "woodcut"),
        "description": description,
        "subjects": extra.pop("subjects", []),
        **extra,
    }


def rendition(owner: str, tier: str = "thumb") -> dict[str, dict[str, Any]]:
    r = {"clean_key": f"clean/{owner}/{tier}", "public_key": f"pub/{owner}/{tier}", "width": 10, "height": 15}
    return {owner: {tier: r | {"bytes": 1234, "sha256": "f" * 64}}}


def write_book(catalog: Catalog, b: dict[str, Any], pages: dict[int, list[dict[str, Any]]], **page_extra: Any) -> None:
    with catalog.transaction() as conn:
        w.upsert_book(conn, b, "hash-1")
        w.delete_pages_not_in(conn, b["id"], list(pages))
        for number, illustrations in pages.items():
            renditions = rendition(page_id(b["id"], number))
            for ill in illustrations:
                renditions |= rendition(ill["id"])
            w.upsert_page(conn, page(b["id"], number, **page_extra.get(str(number), {})), renditions, illustrations)


@pytest.fixture
def library(catalog: Catalog) -> Catalog:
    """Three books: an herbal with two illustrated pages, a dated atlas, and an undated, translated treatise."""
    herbal = book(1, title="Gart der Gesundheit", author="Johann Wonnecke", author_id="johann-wonnecke", year=1485)
    ill_a = illus(herbal["id"], 1, 0, "A mandrake root drawn as a man", subjects=["mandrake", "plants"])
    ill_b = illus(herbal["id"], 2, 0, "A dragon guarding a tree", type="map")
    write_book(catalog, herbal, {1: [ill_a], 2: [ill_b], 3: []}, **{"3": {"image_unavailable": 1}})
    atlas = book(2, title="atlas of the heavens", author="Andreas Cellarius", year=1660, category="astronomy")
    write_book(catalog, atlas, {1: [illus(atlas["id"], 1, 0, "Planets around the sun", subjects=["planets"])]})
    treatise = book(
        3,
        title="Zohar",
        author="Moses de León",
        edition_languages=["Hebrew", "English"],
        translated_at="2026-01-02T00:00:00+00:00",
        institution="Bibliothèque nationale",
    )
    write_book(catalog, treatise, {1: []}, **{"1": {"translation": "In the beginning"}})
    with catalog.transaction() as conn:
        w.replace_collections(
            conn,
            [{"slug": "plants", "title": "Plants", "item_ids": [ill_a["id"], ill_b["id"]], "featured": True}],
        )
    return catalog


def test_a_new_catalog_is_at_the_current_schema_and_empty(catalog: Catalog) -> None:
    assert catalog.schema_version == SCHEMA_VERSION
    assert catalog.counts() == {
        "books": 0,
        "pages": 0,
        "pages_without_image": 0,
        "illustrations": 0,
        "collections": 0,
        "schema_version": SCHEMA_VERSION,
    }


def test_what_ingest_writes_is_what_the_service_reads(library: Catalog) -> None:
    found = library.find_book("BOOK-1")  # slugs and ids fold case
    assert found is not None and found["title"] == "Gart der Gesundheit"
    assert (found["page_count"], found["translated_pages"]) == (3, 0)
    assert library.find_book(found["id"].upper(), counts=False)["slug"] == "book-1"  # type: ignore[index]
    assert [p["number"] for p in library.pages(found["id"], 2, 3)] == [2, 3]
    assert library.page_numbers(found["id"]) == [1, 2, 3]
    image = library.page_image("book-1", 1, "thumb")
    assert image is not None and image["public_key"] == f"pub/{page_id(found['id'], 1)}/thumb"
    missing = library.page_image("book-1", 9, "thumb")
    assert missing is not None and missing["page_id"] is None
    ill = library.illustration(illustration_id(found["id"], 1, 0))
    assert ill is not None and ill["subjects"] == ["mandrake", "plants"]  # JSON columns come back decoded
    assert ill["bbox_w"] == pytest.approx(0.3)
    renditions = library.renditions([page_id(found["id"], 1), ill["id"]])
    assert set(renditions[ill["id"]]) == {"thumb"}
    assert [c["item_ids"] for c in library.collections()] == [[ill["id"], illustration_id(found["id"], 2, 0)]]
    assert library.counts() == {
        "books": 3,
        "pages": 5,
        "pages_without_image": 1,
        "illustrations": 3,
        "collections": 1,
        "schema_version": SCHEMA_VERSION,
    }


def test_rewriting_a_page_replaces_its_illustrations_and_renditions(library: Catalog) -> None:
    herbal = library.find_book("book-1", counts=False)
    assert herbal is not None
    new = illus(herbal["id"], 1, 0, "A mandrake, redrawn")
    write_book(library, book(1, title="Gart der Gesundheit"), {1: [new], 2: []})
    assert [i["description"] for i in library.book_illustrations(herbal["id"])] == ["A mandrake, redrawn"]
    assert library.page_numbers(herbal["id"]) == [1, 2]  # page 3 left the manifest
    gone = illustration_id(herbal["id"], 2, 0)
    assert library.renditions([gone]) == {gone: {}}
    assert library.counts()["pages_without_image"] == 0


def test_a_collection_written_shorter_keeps_no_old_items(library: Catalog) -> None:
    only = illustration_id(book(1)["id"], 1, 0)
    with library.transaction() as conn:
        w.replace_collections(conn, [{"slug": "plants", "title": "Plants again", "item_ids": [only]}])
    found = library.collection("PLANTS")
    assert found is not None and found["title"] == "Plants again" and found["item_ids"] == [only]


def test_withdrawing_a_book_and_removing_an_illustration_hide_them(library: Catalog) -> None:
    herbal = book(1)["id"]
    with library.transaction() as conn:
        assert w.remove_illustration(conn, illustration_id(herbal, 1, 0))
    assert library.illustration(illustration_id(herbal, 1, 0)) is None
    assert set(library.live_illustrations([illustration_id(herbal, 1, 0), illustration_id(herbal, 2, 0)])) == {
        illustration_id(herbal, 2, 0)
    }
    with library.transaction() as conn:
        assert w.withdraw_book(conn, herbal)
        assert not w.withdraw_book(conn, "no-such-book")
    assert library.find_book("book-1") is None
    assert library.illustration(illustration_id(herbal, 2, 0)) is None
    assert library.counts()["books"] == 2 and library.counts()["pages_without_image"] == 0


def test_a_failed_transaction_leaves_nothing(catalog: Catalog) -> None:
    with pytest.raises(RuntimeError), catalog.transaction() as conn:
        w.upsert_book(conn, book(7), "h")
        raise RuntimeError("killed mid-book")
    assert catalog.find_book("book-7") is None


@pytest.mark.parametrize(
    ("sort", "titles"),
    [
        ("title-asc", ["atlas of the heavens", "Gart der Gesundheit", "Zohar"]),
        ("title-desc", ["Zohar", "Gart der Gesundheit", "atlas of the heavens"]),
        ("date_asc", ["Gart der Gesundheit", "atlas of the heavens", "Zohar"]),  # undated last
        ("date_desc", ["atlas of the heavens", "Gart der Gesundheit", "Zohar"]),
        ("recent-translation", ["Zohar", "atlas of the heavens", "Gart der Gesundheit"]),  # untranslated by title
    ],
)
def test_browse_orders_agree_on_both_backends(library: Catalog, sort: str, titles: list[str]) -> None:
    rows, total = query_books(library, BookFilters(), sort=sort, limit=10, offset=0)
    assert total == 3 and [r["title"] for r in rows] == titles


def test_browse_filters_and_title_search(library: Catalog) -> None:
    def titles(**filters: Any) -> list[str]:
        rows, total = query_books(library, BookFilters(**filters), sort=None, limit=10, offset=0)
        assert total == len(rows)
        return [r["title"] for r in rows]

    assert titles(search="gesund") == ["Gart der Gesundheit"]  # the last word also as a prefix
    assert titles(search="heavens cellarius") == ["atlas of the heavens"]
    assert titles(search="moses") == ["Zohar"]
    assert titles(search="leon") == ["Zohar"]  # diacritics folded: "León"
    assert titles(search="!!") == []
    assert titles(year_from=1500) == ["atlas of the heavens"]
    assert titles(category="ASTRONOMY") == ["atlas of the heavens"]
    assert titles(has_edition="hebrew") == ["Zohar"]
    assert titles(has_translation=True) == ["Zohar"]
    assert titles(library="bibliotheque-nationale") == []  # slug of the name folds case, not accents
    assert titles(library="Bibliothèque Nationale") == ["Zohar"]
    assert titles(library="nowhere") == []
    assert titles(author_id="johann-wonnecke") == ["Gart der Gesundheit"]
    assert author_name(library, "johann-wonnecke") == "Johann Wonnecke"
    rows, total = query_books(library, BookFilters(), sort="title-asc", limit=1, offset=2)
    assert total == 3 and [r["title"] for r in rows] == ["Zohar"]
    assert rows[0]["translated_pages"] == 1


def test_illustration_text_search_finds_the_same_on_both_backends(library: Catalog) -> None:
    herbal = book(1)["id"]
    scores = text_search(library, "the mandrake")  # "the" is a function word: dropped
    assert list(scores) == [illustration_id(herbal, 1, 0)] and scores[illustration_id(herbal, 1, 0)] == 1.0
    ranked = text_search(library, "planets dragon")
    assert set(ranked) == {illustration_id(herbal, 2, 0), illustration_id(book(2)["id"], 1, 0)}
    assert text_search(library, "plane") == {illustration_id(book(2)["id"], 1, 0): 1.0}  # prefix of the last word
    assert matching_ids(library, "dragon guarding") == {illustration_id(herbal, 2, 0)}
    assert matching_ids(library, "guarding dragon") == set()  # a phrase: its words in order
    assert matching_ids(library, "MAP") == {illustration_id(herbal, 2, 0)}  # by type
    assert text_search(library, "") == {}
    assert set(text_search(library, "dragón")) == {illustration_id(herbal, 2, 0)}  # diacritics folded both ways


def test_api_keys_issue_look_up_and_revoke(catalog: Catalog) -> None:
    key, record = create_key(catalog, "full", "lab")
    assert lookup_key(catalog, key) == record
    assert lookup_key(catalog, key[:-1] + ("A" if key[-1] != "A" else "B")) is None
    assert revoke_key(catalog, record.id) and not revoke_key(catalog, record.id)
    found = lookup_key(catalog, key)
    assert found is not None and found.state() == "revoked"
    assert [k.id for k in list_keys(catalog)] == [record.id]


def test_another_process_sees_a_write_at_once_and_search_state_sees_it_changed(backend: Backend) -> None:
    """Two connections to one catalog, as two nodes (or a node and an ingester): a commit by one is read by the
    other at once, and the data version search state polls moves; an API key write moves it only on SQLite,
    where the version is the file's (PostgreSQL counts only writes search state reads)."""
    node, ingester = backend.open(), backend.open()
    before = node.query_one("PRAGMA data_version")
    write_book(ingester, book(5, title="Fresh"), {1: []})
    assert node.find_book("book-5")["title"] == "Fresh"  # type: ignore[index]
    moved = node.query_one("PRAGMA data_version")
    assert moved != before
    key, record = create_key(ingester, "full")
    assert lookup_key(node, key) == record
    revoke_key(ingester, record.id)
    assert lookup_key(node, key).state() == "revoked"  # type: ignore[union-attr]
    if backend.dialect == "postgres":
        assert node.query_one("PRAGMA data_version") == moved


def test_a_catalog_from_a_newer_imagesvc_is_refused(backend: Backend) -> None:
    backend.open().close()
    if backend.dialect == "sqlite":
        conn = sqlite3.connect(backend.opened[0].path)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
        conn.close()
    else:
        import psycopg

        with psycopg.connect(backend.settings["IMAGESVC_DATABASE_URL"], autocommit=True) as conn:
            conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (SCHEMA_VERSION + 1,))
    backend.opened.clear()
    with pytest.raises(RuntimeError, match="upgrade imagesvc"):
        backend.open()


_MIGRATE = """
import sys, time
from imagesvc.catalog import Catalog
from imagesvc.catalog.postgres import PostgresCatalog
until = float(sys.argv[3])
while time.time() < until:
    pass
catalog = Catalog(sys.argv[2]) if sys.argv[1] == "sqlite" else PostgresCatalog(sys.argv[2])
print(catalog.schema_version, catalog.counts()["books"])
catalog.close()
"""


def test_two_nodes_migrating_one_new_catalog_at_once_both_start(backend: Backend, tmp_path: Any) -> None:
    """Nodes started together on an empty catalog: one migrates (an advisory lock on PostgreSQL, an immediate
    transaction that re-reads the version on SQLite), the other waits and finds it current; both serve."""
    import time

    where = backend.settings.get("IMAGESVC_DATABASE_URL") or str(tmp_path / "catalog.sqlite3")
    start = str(time.time() + 1.5)  # both spin until the same instant, then open the empty catalog
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _MIGRATE, backend.dialect, where, start],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err[-2000:]
        assert out.split() == [str(SCHEMA_VERSION), "0"]
    catalog = backend.open()
    assert catalog.schema_version == SCHEMA_VERSION
    if backend.dialect == "postgres":
        versions = catalog.column("SELECT version FROM schema_version ORDER BY version")
        assert versions == list(range(1, SCHEMA_VERSION + 1))  # each migration applied once


def test_ingest_finds_a_pages_illustrations_by_index(catalog: Catalog) -> None:
    """upsert_page looks illustrations up by page_id (migration 5's index, not a scan of every illustration), and
    /health counts pages without an image from its partial index."""
    if catalog.dialect == "sqlite":
        plan = catalog.query_all("EXPLAIN QUERY PLAN SELECT id FROM illustrations WHERE page_id = ?", ("x",))
        assert any("illustrations_by_page" in r["detail"] for r in plan), plan
        counts = catalog.query_all(
            "EXPLAIN QUERY PLAN SELECT count(*) FROM pages p INDEXED BY pages_without_image JOIN books b"
            " ON b.id = p.book_id WHERE b.withdrawn = 0 AND p.image_unavailable = 1"
        )
        assert any("COVERING INDEX pages_without_image" in r["detail"] for r in counts), counts
    else:
        names = set(catalog.column("SELECT indexname FROM pg_indexes WHERE tablename IN ('illustrations', 'pages')"))
        assert {"illustrations_by_page", "pages_without_image"} <= names
        with catalog.transaction() as conn:
            conn.execute("SET LOCAL enable_seqscan = off")
            plan = "\n".join(
                r[0] for r in conn.execute("EXPLAIN SELECT id FROM illustrations WHERE page_id = ?", ("x",))
            )
        assert "illustrations_by_page" in plan
        from imagesvc.catalog.search_sql import DOC

        searches = {  # the text searches read their GIN indexes (migrations 10 and 13)
            "illustrations_search_doc": f"SELECT i.id FROM illustrations i WHERE {DOC} @@ to_tsquery('simple', ?)",
            "book_search_doc": "SELECT s.book_id FROM book_search s"
            " WHERE s.doc @@ to_tsquery('simple', imagesvc_fold(?))",
        }
        for index, sql in searches.items():
            with catalog.transaction() as conn:
                conn.execute("SET LOCAL enable_seqscan = off")
                plan = "\n".join(r[0] for r in conn.execute(f"EXPLAIN {sql}", ("'x'",)))
            assert f"Index Scan on {index}" in plan, plan


def test_json_columns_round_trip(library: Catalog) -> None:
    zohar = library.find_book("book-3", counts=False)
    assert zohar is not None and zohar["edition_languages"] == ["Hebrew", "English"] and zohar["chapters"] == []
    assert json.loads(json.dumps(zohar))["edition"] == {}


def test_the_change_log_records_create_update_and_delete_on_both_backends(library: Catalog) -> None:
    """The bulk dataset's change feed (triggers of migration 6): a new book is a Create, a new source manifest hash an
    Update (the same hash written again is nothing), a withdrawal a Delete, a withdrawn book coming back a Create."""
    start = dataset.change_count(library)
    assert start == 3 and {c["kind"] for c in dataset.changes(library, 1, start)} == {"Create"}
    fresh = book(5, title="Musaeum Hermeticum")
    write_book(library, fresh, {1: [], 2: []})  # hash-1
    write_book(library, fresh, {1: [], 2: []})  # the same manifest again: no change
    with library.transaction() as conn:
        w.upsert_book(conn, fresh, "hash-2")
    with library.transaction() as conn:
        assert w.withdraw_book(conn, fresh["id"])
        assert w.withdraw_book(conn, fresh["id"])  # already withdrawn: no second Delete
    with library.transaction() as conn:
        w.upsert_book(conn, fresh, "hash-2")  # back, with the hash it had
    logged = dataset.changes(library, start + 1, dataset.change_count(library))
    assert [(c["book_id"], c["slug"], c["kind"]) for c in logged] == [
        (fresh["id"], "book-5", kind) for kind in ("Create", "Update", "Delete", "Create")
    ]
    assert [c["seq"] for c in logged] == list(range(start + 1, start + 5))
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", c["at"]) for c in logged)
    assert dataset.book_versions(library, [fresh["id"], "no-such-book"]) == {
        fresh["id"]: {"seq": start + 4, "at": max(c["at"] for c in logged)}
    }
    assert dataset.changes(library, start + 2, start + 2)[0]["kind"] == "Update"


def test_the_dataset_listing_pages_through_live_books(library: Catalog) -> None:
    herbal, atlas = book(1)["id"], book(2)["id"]
    assert dataset.dataset_total(library, None) == 5 and dataset.dataset_total(library, "BOOK-1") == 3
    first = dataset.dataset_pages(library, None, 2, None)
    assert [(r["book_id"], r["number"]) for r in first] == [(herbal, 1), (herbal, 2)]
    after = dataset.dataset_pages(library, (herbal, 2), 10, None)
    assert [(r["book_id"], r["number"]) for r in after][:2] == [(herbal, 3), (atlas, 1)]
    assert after[0]["slug"] == "book-1" and after[0]["image_unavailable"] == 1
    assert [r["number"] for r in dataset.archive_pages(library, herbal, 1, 3, "thumb")] == [1, 2, 3]
    assert all(r["stored"] for r in dataset.archive_pages(library, herbal, 1, 3, "thumb"))
    assert not any(r["stored"] for r in dataset.archive_pages(library, herbal, 1, 3, "large"))
    with library.transaction() as conn:
        w.withdraw_book(conn, herbal)
    assert dataset.dataset_total(library, None) == 2 and dataset.dataset_pages(library, None, 10, "book-1") == []


def test_page_listing_and_page_search_on_both_backends(library: Catalog) -> None:
    herbal, zohar = book(1)["id"], book(3)["id"]
    listed = library.page_list(herbal)
    assert [(p["number"], bool(p["has_ocr"]), bool(p["has_translation"])) for p in listed] == [
        (1, True, False),
        (2, True, False),
        (3, True, False),
    ]
    assert "ocr" not in listed[0] and listed[2]["image_unavailable"] == 1
    found, total = library.search_pages(zohar, query_words('"the beginning"'), ["translation"], limit=5, offset=0)
    assert (found, total) == ([(1, 1.1, ("translation",))], 1)
    assert library.search_pages(herbal, query_words("page"), ["ocr"], limit=2, offset=1) == (
        [(2, 1.1, ("ocr",)), (3, 1.1, ("ocr",))],
        3,
    )
    assert library.search_pages("no-such-book", query_words("page"), ["ocr"], limit=5, offset=0) == ([], 0)


def test_a_retitled_or_deleted_book_is_searched_by_what_it_is_now(catalog: Catalog) -> None:
    """The catalogue browser's search reads stored vectors on PostgreSQL (book_search, migration 13) kept by every
    write of a book: a new title is found and the old one no longer, a deleted book is gone (both backends)."""
    original = book(41, title="Splendor Solis", author="Trismosin")
    write_book(catalog, original, {1: []})
    assert query_books(catalog, BookFilters(search="splendor"), sort=None, limit=5, offset=0)[1] == 1
    write_book(catalog, {**original, "title": "Aurora Consurgens"}, {1: []})
    assert query_books(catalog, BookFilters(search="splendor"), sort=None, limit=5, offset=0)[1] == 0
    rows, total = query_books(catalog, BookFilters(search="aurora trismosin"), sort=None, limit=5, offset=0)
    assert total == 1 and rows[0]["title"] == "Aurora Consurgens"
    with catalog.transaction() as conn:
        conn.execute("DELETE FROM books WHERE id = ?", (original["id"],))
    assert query_books(catalog, BookFilters(search="aurora"), sort=None, limit=5, offset=0)[1] == 0
