"""The catalog counts ``/health`` reports, read again only when the catalog changes.

Counting every live page and illustration is a scan (millions of index entries in the library's catalog), and load
balancers ask ``/health`` every few seconds on every node. So the counts are read in a worker thread once per catalog
change (``Catalog.change_stamp``: any process's committed writes) and served from memory in between, one read for
any number of probes waiting on it: a probe during a flood of work costs no thread hop. As a safety net they are
read again in the background after ``MAX_AGE`` seconds, while the previous counts are still answered.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable
from typing import Any

from imagesvc.catalog.reader import counts

__all__ = ["CatalogCounts"]

log = logging.getLogger("imagesvc.web.health")
MAX_AGE = 30.0


class CatalogCounts:
    """``await CatalogCounts(...).get(catalog, stamp)``: the counts of ``catalog`` as of ``stamp``."""

    def __init__(self, read: Callable[[Any], dict[str, int]] = counts) -> None:
        self._read = read
        self._value: dict[str, int] | None = None
        self._key: Hashable = None
        self._at = 0.0
        self._job: asyncio.Future[dict[str, int]] | None = None

    async def get(self, catalog: Any, stamp: Hashable) -> dict[str, int]:
        key = (id(catalog), stamp)
        if self._value is not None and key == self._key:
            if time.monotonic() - self._at >= MAX_AGE and self._job is None:
                self._job = asyncio.ensure_future(self._refresh(catalog, key))
                self._job.add_done_callback(_log_failure)
            return self._value
        if self._job is None:
            self._job = asyncio.ensure_future(self._refresh(catalog, key))
        return await asyncio.shield(self._job)

    async def _refresh(self, catalog: Any, key: Hashable) -> dict[str, int]:
        try:
            value = await asyncio.to_thread(self._read, catalog)
        finally:
            self._job = None
        self._value, self._key, self._at = value, key, time.monotonic()
        return value


def _log_failure(job: asyncio.Future[dict[str, int]]) -> None:
    if not job.cancelled() and job.exception() is not None:
        log.warning("catalog counts for /health could not be read again: %s", job.exception())
