"""The book change log behind the dataset change feed (IIIF Change Discovery), on both backends: a write that was
rolled back (an ingest killed mid-book) leaves no activity, and the feed's count and pages are of the activities
there are, not of the sequence numbers handed out."""

from __future__ import annotations

import threading

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


def test_the_log_only_grows_at_its_end_while_two_ingesters_write(backend: Backend) -> None:
    """Two ingesters share a PostgreSQL catalog (docs/architecture.md): one slow book, one fast. A harvester that read
    the feed while the slow one was still writing must find every later activity after what it read (IIIF Change
    Discovery: it walks back from the end to the last activity it processed)."""
    if backend.dialect == "sqlite":
        pytest.skip("SQLite has one writer at a time: a change's number is its commit order")
    slow, fast = backend.open(), backend.open()
    write_book(fast, "aaaa", {1: ("alpha", None, None)})
    began, release = threading.Event(), threading.Event()

    def slow_ingest() -> None:
        with slow.transaction() as conn:
            w.upsert_book(conn, _book("slow"), "hash")
            began.set()
            assert release.wait(30)  # still writing its pages while the other ingester commits

    thread = threading.Thread(target=slow_ingest)
    thread.start()
    other = threading.Thread(target=lambda: write_book(fast, "fast", {1: ("beta", None, None)}))
    try:
        assert began.wait(30)
        other.start()
        other.join(0.5)  # the fast ingester commits now, or waits its turn behind the slow one
        read = dataset.changes(backend.open(), 1, 100)  # a harvester's pass meanwhile
    finally:
        release.set()
        thread.join()
        other.join(30)
    now = dataset.changes(fast, 1, 100)
    assert [c["book_id"] for c in now[: len(read)]] == [c["book_id"] for c in read]
    assert sorted(c["book_id"] for c in now[len(read) :]) == sorted({"slow", "fast"} - {c["book_id"] for c in read})
    assert [c["at"] for c in now] == sorted(c["at"] for c in now)  # endTimes rise along the log
