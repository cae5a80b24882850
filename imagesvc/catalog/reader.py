"""A catalog connection of its own for a worker thread: large reads (table scans, counts) off the event loop."""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from imagesvc.catalog import Catalog

__all__ = ["reader"]


@contextmanager
def reader(catalog: Any) -> Iterator[Any]:
    """A catalog to read from in a worker thread: a connection of its own on the same file, so its reads never
    interleave with the loop's transactions; the catalog itself when it lives in memory or in PostgreSQL (whose pool
    gives each thread a connection of its own per statement)."""
    path = getattr(catalog, "path", None)
    if path is None or str(path) == ":memory:" or not Path(path).exists():
        yield catalog
        return
    own = Catalog(path)
    try:
        yield own
    finally:
        own.close()


def counts(catalog: Any) -> dict[str, int]:
    """``catalog.counts()`` read on a connection of its own (blocking: call it in a worker thread), kept until the
    catalog changes: ``/health`` asks for them on every probe. (Since migration 11 a read is a pass over the books'
    ``book_counts`` rows, a few milliseconds at 15,000 books; it counted every page's index entry before, ~2-8 s at
    4.5 million pages.)"""
    stamp = catalog.change_stamp()
    cached = _COUNTS.get(catalog)
    if cached is not None and cached[0] == stamp:
        return dict(cached[1])
    with reader(catalog) as source:
        found = source.counts()
    _COUNTS[catalog] = (stamp, found)  # read after the stamp: a write meanwhile makes the next call count again
    return dict(found)


_COUNTS: weakref.WeakKeyDictionary[Any, tuple[Any, dict[str, int]]] = weakref.WeakKeyDictionary()
