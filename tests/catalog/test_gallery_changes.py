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
from imagesvc.search.ranking import GalleryTable, Query, rank
from tests.catalog.test_catalog import book, illus, library, write_book

__all__ = ["library"]  # the three-book fixture, used here


def view(table: GalleryTable) -> dict[str, Any]:
    """What ranking reads of a table, by name (type codes may be numbered differently)."""
    return {
        "ids": table.ids,
        "books": [table.book_ids[b] for b in table.book],
        "types": [table.types[t] for t in table.type],
        "year": table.year.tolist(),
        "live": table.live.tolist(),
        "group": table.group.tolist(),
        "terms": {key: rows.tolist() for key, rows in sorted(table.terms.items())},
        "rowid": None if table.rowid is None else table.rowid.tolist(),
    }


def follows(catalog: Catalog, table: GalleryTable) -> GalleryTable:
    updated = updated_table(catalog, table)
    assert updated is not None
    whole = GalleryTable.from_catalog(catalog)
    assert view(updated) == view(whole)
    assert updated.exact and updated.seq == whole.seq
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
