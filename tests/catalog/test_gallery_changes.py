"""A node's gallery table follows the catalog book by book (migration 10's ``gallery_changes``, on both backends):
after each kind of write the table updated from the books written is the table a whole read gives, row for row."""

from __future__ import annotations

from typing import Any

import pytest

from imagesvc.catalog import Catalog
from imagesvc.catalog import writes as w
from imagesvc.catalog.api_keys import create_key
from imagesvc.search import changes
from imagesvc.search.changes import updated_table
from imagesvc.search.dense import illustration_text, text_rows
from imagesvc.search.ranking import GalleryTable, Query, rank
from tests.catalog.conftest import Backend
from tests.catalog.test_catalog import book, illus, library, write_book

__all__ = ["library"]  # the three-book fixture, used here


def partition(group: list[int]) -> list[int]:
    """Near-duplicate groups numbered by their first row: two tables group alike when these are equal."""
    first: dict[int, int] = {}
    return [-1 if g < 0 else first.setdefault(g, len(first)) for g in group]


def view(table: GalleryTable) -> dict[str, Any]:
    """What ranking reads of a table, by name (type codes and group numbers may differ, and a term's rows may come
    in any order)."""
    return {
        "ids": table.ids,
        "books": [table.book_ids[b] for b in table.book],
        "types": [table.types[t] for t in table.type],
        "year": table.year.tolist(),
        "live": table.live.tolist(),
        "group": partition(table.group.tolist()),
        "terms": {key: sorted(rows.tolist()) for key, rows in sorted(table.terms.items())},
        "rowid": None if table.rowid is None else table.rowid.tolist(),
    }


def follows(catalog: Catalog, table: GalleryTable) -> GalleryTable:
    updated = updated_table(catalog, table)
    assert updated is not None
    whole = GalleryTable.from_catalog(catalog)
    assert view(updated) == view(whole)
    assert updated.exact and updated.seq == whole.seq
    if updated is not table:  # rows of a list of ids (the dense index's), followed from the old table's answer
        ids = [*table.ids, "0000000000000000-1:0", *whole.ids]
        followed = updated.rows_following(table, table.rows_of(ids), ids)
        assert followed is not None and followed.tolist() == updated.rows_of(ids).tolist()
    return updated


def test_the_table_follows_new_changed_withdrawn_and_removed_illustrations(library: Catalog) -> None:
    table = GalleryTable.from_catalog(library)
    herbal_id = book(1)["id"]
    # A new book sorting between two others, with a new type and a near-duplicate of nothing yet.
    middle = book(0x1_8, title="Musaeum", year=1625)
    fresh = [
        illus(
            middle["id"],
            1,
            0,
            "An emblem of the salamander",
            type="emblem",
            subjects=["fire"],
            phash="ff00ff00ff00ff00",
        ),
        illus(middle["id"], 2, 0, "The same emblem, rescanned", type="emblem", phash="ff00ff00ff00ff01"),
    ]
    write_book(library, middle, {1: [fresh[0]], 2: [fresh[1]]})
    table = follows(library, table)
    found = rank(table, Query(subject="fire"))
    assert [table.ids[r] for r in found.rows] == [fresh[0]["id"]]
    assert table.group[table.row_of(fresh[0]["id"])] == table.group[table.row_of(fresh[1]["id"])] >= 0

    # A book written again with one illustration fewer and other subjects.
    again = illus(herbal_id, 1, 0, "A mandrake root", subjects=["roots"], phash="ff00ff00ff00ff03")
    write_book(library, book(1, year=1486), {1: [again], 2: [], 3: []})
    table = follows(library, table)
    assert [table.ids[r] for r in rank(table, Query(subject="roots")).rows] == [again["id"]]
    assert not rank(table, Query(subject="mandrake")).rows

    # An illustration removed, then a book withdrawn: gone from every listing.
    with library.transaction() as conn:
        w.remove_illustration(conn, fresh[1]["id"])
    table = follows(library, table)
    assert fresh[1]["id"] not in [table.ids[r] for r in rank(table, Query(max_per_book=100)).rows]
    with library.transaction() as conn:
        w.withdraw_book(conn, middle["id"])
    table = follows(library, table)
    assert not rank(table, Query(type="emblem")).rows

    # A write the table does not read leaves the table as it is.
    create_key(library, "full", "a key")
    assert updated_table(library, table) is table


def test_too_many_books_at_once_asks_for_a_whole_read(library: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    table = GalleryTable.from_catalog(library)
    for n in (7, 8):
        write_book(library, book(n), {1: [illus(book(n)["id"], 1, 0, f"Picture {n}")]})
    monkeypatch.setattr(changes, "MAX_BOOKS", 1)
    assert updated_table(library, table) is None


def test_keyword_matches_come_back_as_numbers_the_table_maps_even_after_a_write(library: Catalog) -> None:
    """A keyword query names its matches by number (SQLite's rowid, PostgreSQL's search_num, migration 12) with the
    change number it read them at: a table read at that number maps them by number; a table written past since maps
    them through their ids and leaves out the illustrations it does not hold yet; each way the same rows as by id."""
    from imagesvc.search.engine import SearchEngine
    from imagesvc.search.text import ids_of_rowids, keyword_hits

    table = GalleryTable.from_catalog(library)
    hits = keyword_hits(library, "dragon mandrake")
    assert hits.rowids is not None and hits.seq == table.seq and table.exact
    rows, scores = SearchEngine._hit_rows(table, hits, library)
    by_id = dict(zip(ids_of_rowids(library, hits.rowids), hits.scores.tolist(), strict=True))
    assert dict(zip([table.ids[r] for r in rows.tolist()], scores.tolist(), strict=True)) == by_id
    assert len(by_id) == 2 and max(by_id.values()) == 1.0

    late = book(0x9, title="Bestiary", year=1600)
    write_book(library, late, {1: [illus(late["id"], 1, 0, "A dragon with two heads")]})
    again = keyword_hits(library, "dragon mandrake")
    assert again.seq is not None and again.seq > table.seq and len(again) == 3
    rows, _ = SearchEngine._hit_rows(table, again, library)  # the old table: the new dragon is not in it yet
    assert sorted(table.ids[r] for r in rows.tolist()) == sorted(by_id)
    fresh = follows(library, table)
    rows, _ = SearchEngine._hit_rows(fresh, again, library)
    assert illus(late["id"], 1, 0, "")["id"] in {fresh.ids[r] for r in rows.tolist()} and len(rows) == 3


async def test_a_query_asked_again_reads_its_matches_once_until_the_catalog_changes(
    library: Catalog, backend: Backend, tmp_path: Any
) -> None:
    """The next page, a filter or another searcher of the same words reuse the matches read for this catalog
    generation (the same page as a fresh engine gives); a catalog write makes the next query read them again."""
    from imagesvc.search.engine import SearchEngine
    from tests.library import settings_for

    settings = settings_for(tmp_path, text_model="off")
    engine = SearchEngine(settings, library)

    async def ids(q: Query, on: SearchEngine = engine) -> list[str]:
        found = await on.search(q)
        return [found.table.ids[r] for r in found.ranked.rows]

    dragons = await ids(Query(text="dragon mandrake"))
    assert len(dragons) == 2 and engine.keywords.misses == 1
    assert await ids(Query(text="dragon mandrake", type="map")) == [illus(book(1)["id"], 2, 0, "")["id"]]
    assert await ids(Query(text="dragon mandrake", offset=1)) == dragons[1:]
    assert (engine.keywords.hits, engine.keywords.misses) == (2, 1)
    with pytest.raises(ValueError):  # what is kept cannot be changed by a caller
        engine.keywords.peek(engine.current.generation, "dragon mandrake")[1][0] = 0.0  # type: ignore[index,union-attr]

    late = book(0x9, title="Bestiary", year=1600)
    write_book(backend.open(), late, {1: [illus(late["id"], 1, 0, "A dragon with two heads")]})  # an ingester
    after = await ids(Query(text="dragon mandrake"))
    assert illus(late["id"], 1, 0, "")["id"] in after and engine.keywords.misses == 2
    assert after == await ids(Query(text="dragon mandrake"), SearchEngine(settings, library))  # as read afresh


async def test_the_spelling_vocabulary_follows_the_catalog_book_by_book(
    library: Catalog, backend: Backend, tmp_path: Any
) -> None:
    """With the text model on, a query word is corrected to a word of the library. A write by another process
    re-reads the words of the books it touched, and only those (the whole library was re-read after every change,
    ~3 s of CPU per worker at 200,000 illustrations): a new book's words are corrected to at once, and a word leaves
    when no live illustration of any book holds it any more."""
    from imagesvc.search.engine import SearchEngine
    from imagesvc.search.spelling import Vocabulary
    from tests.library import settings_for

    engine = SearchEngine(settings_for(tmp_path, text_model="e5"), library)  # the model itself is never loaded
    writer = backend.open()  # another process's connection, as ingest and the CLI write

    async def vocabulary() -> Vocabulary:
        return await engine.vocabulary(await engine.snapshot())

    words = await vocabulary()
    read, whole = words.read, Vocabulary((r["book_id"], illustration_text(r)) for r in text_rows(library))
    assert engine.vocabulary_reads == 1 and words.words == whole.words and "dragon" in words.words
    assert words.closest("zqsalamandre") is None

    bestiary = book(0x5A1, title="Bestiary", year=1625)
    pictures = [
        illus(bestiary["id"], 1, 0, "A zqsalamander in the athanor"),
        illus(bestiary["id"], 2, 0, "A zqsalamander fighting a dragon"),
    ]
    write_book(writer, bestiary, {1: [pictures[0]], 2: [pictures[1]]})
    words = await vocabulary()
    assert (engine.vocabulary_reads, engine.vocabulary_updates) == (1, 1)
    assert words.read == read + 2  # the new book's two illustrations, nothing else
    assert words.closest("zqsalamandre") == "zqsalamander" and words.closest("athanorr") == "athanor"

    with writer.transaction() as conn:  # the one illustration that says "athanor" removed
        w.remove_illustration(conn, pictures[0]["id"])
    words = await vocabulary()
    assert words.read == read + 3 and "athanor" not in words.words and words.closest("athanorr") is None
    assert words.closest("zqsalamandre") == "zqsalamander"

    with writer.transaction() as conn:
        w.withdraw_book(conn, bestiary["id"])
    words = await vocabulary()
    assert words.closest("zqsalamandre") is None and "zqsalamander" not in words.words
    assert "dragon" in words.words  # the herbal's dragon stays
    assert (engine.vocabulary_reads, engine.vocabulary_updates) == (1, 3) and words.read == read + 3
    assert engine.status()["vocabulary"] == {
        "words": len(whole.words),
        "read_whole": 1,
        "updated_by_book": 3,
        "texts_read": read + 3,
    }
    assert words.words == whole.words  # as a whole read gives it: the same words, each held by as many books
