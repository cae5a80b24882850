"""The catalogue page's queries on both backends: facet counts that say what each choice would give, the
has-images filter, and keyset paging by title that reaches any depth and loses nothing while books are added."""

from __future__ import annotations

import pytest

from imagesvc.catalog import Catalog
from imagesvc.catalog.library import BookFilters, facet_counts, query_books
from tests.catalog.test_catalog import book, illus, library, write_book

__all__ = ["library"]  # the three-book fixture


def test_facets_count_the_books_each_choice_would_give(library: Catalog) -> None:
    counts = facet_counts(library, BookFilters())
    assert dict(counts["has_images"]) == {1: 2, 0: 1}  # herbal and atlas are illustrated, the treatise is not
    assert dict(counts["library"]) == {"Bibliotheca": 2, "Bibliothèque nationale": 1}
    assert dict(counts["century"]) == {1400: 1, 1600: 1}  # the treatise has no year
    assert dict(counts["language"]) == {"Latin": 3}
    for name, found in counts.items():  # each count is what choosing that value gives
        for value, count in found:
            if name == "century":
                chosen = BookFilters(year_from=value, year_to=value + 99)
            elif name == "has_images":
                chosen = BookFilters(has_images=bool(value))
            else:
                chosen = BookFilters(**{name: value})
            assert query_books(library, chosen, sort="title-asc", limit=10, offset=0)[1] == count, (name, value)
    # A facet's own filter does not narrow its own counts; the others do.
    narrowed = facet_counts(library, BookFilters(has_images=True))
    assert dict(narrowed["has_images"]) == {1: 2, 0: 1}
    assert dict(narrowed["library"]) == {"Bibliotheca": 2}


def test_has_images_keeps_the_illustrated_books(library: Catalog) -> None:
    rows, total = query_books(library, BookFilters(has_images=True), sort="title-asc", limit=10, offset=0)
    assert total == 2 and [r["title"] for r in rows] == ["atlas of the heavens", "Gart der Gesundheit"]
    rows, total = query_books(library, BookFilters(has_images=False), sort="title-asc", limit=10, offset=0)
    assert total == 1 and rows[0]["title"] == "Zohar"


@pytest.mark.parametrize("size", [1, 2, 5])
def test_keyset_pages_by_title_reach_every_book_once_while_books_arrive(library: Catalog, size: int) -> None:
    for n, title in enumerate(["Ars magna", "ars magna", "Émblemata", "herbarium", "Zodiacus"], start=10):
        write_book(library, book(n, title=title), {1: [illus(f"{n:016x}", 1, 0, "A plate")]})
    whole, total = query_books(library, BookFilters(), sort="title-asc", limit=100, offset=0)
    seen: list[str] = []
    after = None
    while True:
        rows, _ = query_books(library, BookFilters(), sort="title-asc", limit=size, offset=0, after=after)
        seen += [r["id"] for r in rows]
        if len(rows) < size:
            break
        after = rows[-1]["id"]
        if len(seen) == 3:  # a book arrives behind the reader (it sorts first): the walk neither repeats nor skips
            write_book(library, book(99, title="Aaa"), {1: []})
    assert seen == [r["id"] for r in whole] and len(seen) == total
    with pytest.raises(ValueError):
        query_books(library, BookFilters(), sort="recent", limit=2, offset=0, after=seen[0])


@pytest.mark.parametrize("search", [":", "''", "  ", "&|!"])
def test_a_search_without_a_word_counts_no_book(library: Catalog, search: str) -> None:
    assert query_books(library, BookFilters(search=search), sort=None, limit=5, offset=0) == ([], 0)
    assert all(found == [] for found in facet_counts(library, BookFilters(search=search)).values())
