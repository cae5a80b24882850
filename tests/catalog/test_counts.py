"""The counts ``/health`` shows are kept between probes (they read every page's index entry) and are never stale:
a write by this process or by another node shows in the next answer, on both backends."""

from __future__ import annotations

from imagesvc.catalog import Catalog
from imagesvc.catalog import writes as w
from imagesvc.catalog.reader import counts
from tests.catalog.conftest import Backend
from tests.catalog.test_bulk_writes import TEXTS, _book, _rows


def _write(catalog: Catalog, book_id: str) -> None:
    with catalog.transaction() as conn:
        w.upsert_book(conn, _book(book_id), "h")
        w.upsert_pages(conn, _rows(book_id, TEXTS, {1: "a sun"}))


def test_counts_follow_writes_by_this_node_and_by_another(catalog: Catalog, backend: Backend) -> None:
    _write(catalog, "first")
    assert (counts(catalog)["books"], counts(catalog)["pages"], counts(catalog)["illustrations"]) == (1, 3, 1)
    other = backend.open()  # a second node, or an ingester
    _write(other, "second")
    assert (counts(catalog)["books"], counts(catalog)["pages"]) == (2, 6)
    with catalog.transaction() as conn:  # this node's own write
        w.withdraw_book(conn, "first")
    assert (counts(catalog)["books"], counts(catalog)["pages"], counts(catalog)["illustrations"]) == (1, 3, 1)
    with other.transaction() as conn:
        w.remove_illustration(conn, "second-1-i0")
    assert counts(catalog)["illustrations"] == 0
    assert counts(other) == counts(catalog)
