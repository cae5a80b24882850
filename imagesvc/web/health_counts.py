"""The catalog counts ``/health`` reports, read again only when the catalog changes.

Counting every live page and illustration is a scan (millions of index entries in the library's catalog), and load
balancers ask ``/health`` every few seconds on every node. So the counts are read in a worker thread once per catalog
change (``Catalog.change_stamp``: any process's committed writes) and served from memory in between, one read for
any number of probes waiting on it: a probe during a flood of work costs no thread hop. The stamp is the whole key:
every write that changes what is counted moves it, so no timed re-read is needed (``reader.counts`` keeps the same
numbers per stamp for its other callers, so one here would recount nothing anyway).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from typing import Any

from imagesvc.catalog.reader import counts

__all__ = ["CatalogCounts"]


class CatalogCounts:
    """``await CatalogCounts(...).get(catalog, stamp)``: the counts of ``catalog`` as of ``stamp``."""

    def __init__(self, read: Callable[[Any], dict[str, int]] = counts) -> None:
        self._read = read
        self._value: dict[str, int] | None = None
        self._key: Hashable = None
        self._job: asyncio.Future[dict[str, int]] | None = None

    async def get(self, catalog: Any, stamp: Hashable) -> dict[str, int]:
        key = (id(catalog), stamp)
        if self._value is not None and key == self._key:
            return self._value
        if self._job is None:
            self._job = asyncio.ensure_future(self._refresh(catalog, key))
        return await asyncio.shield(self._job)

    async def _refresh(self, catalog: Any, key: Hashable) -> dict[str, int]:
        try:
            value = await catalog.gate.run(self._read, catalog)  # the catalog's threads, under its deadline
        finally:
            self._job = None
        self._value, self._key = value, key
        return value
