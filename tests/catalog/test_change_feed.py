"""The book change log behind the dataset change feed (IIIF Change Discovery), on both backends: a write that was
rolled back (an ingest killed mid-book) leaves no activity, and the feed's count and pages are of the activities
there are, not of the sequence numbers handed out."""

from __future__ import annotations

import pytest

from imagesvc.catalog import dataset
from imagesvc.catalog import writes as w
from tests.catalog.conftest import Backend
from tests.catalog.test_page_search import _book, write_book


def test_a_rolled_back_book_write_leaves_no_hole_in_the_feed(backend: Backend) -> None:
    catalog = backend.open()
    write_book(catalog, "aaaa", {1: ("alpha", None, None)})
    with pytest.raises(RuntimeError), catalog.transaction() as conn:
        w.upsert_book(conn, _book("bbbb"), "hash")  # logged by the trigger, then rolled back
        raise RuntimeError("the ingest was killed before its commit")
    write_book(catalog, "cccc", {1: ("gamma", None, None)})
    assert [c["book_id"] for c in dataset.changes(catalog, 1, 100)] == ["aaaa", "cccc"]
    assert dataset.change_count(catalog) == 2  # totalItems: the activities there are
    assert [c["book_id"] for c in dataset.changes(catalog, 2, 2)] == ["cccc"]  # the second activity, by position
