"""/health's catalog counts are read once per catalog change, not on every probe (at the library's size each read
is a scan of millions of index entries, and load balancers probe every few seconds)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from imagesvc.catalog import Catalog
from imagesvc.web.health_counts import CatalogCounts


class Reads:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, catalog: Any) -> dict[str, int]:
        self.calls += 1
        return {"books": self.calls}


async def test_probes_between_changes_read_nothing_and_a_change_is_read_before_answering() -> None:
    reads, catalog = Reads(), Catalog(":memory:")
    counts = CatalogCounts(reads)
    assert await asyncio.gather(*(counts.get(catalog, 1) for _ in range(20))) == [{"books": 1}] * 20
    assert reads.calls == 1  # twenty concurrent probes, one read
    assert await counts.get(catalog, 2) == {"books": 2}  # the catalog changed: fresh counts, not the old ones
    assert await counts.get(Catalog(":memory:"), 2) == {"books": 3}  # another catalog (a followed snapshot) is read


async def test_a_failed_read_is_an_error_for_the_probe_that_waited_and_is_tried_again() -> None:
    calls = []

    def flaky(catalog: Any) -> dict[str, int]:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("database is down")
        return {"books": 7}

    counts, catalog = CatalogCounts(flaky), Catalog(":memory:")
    with pytest.raises(RuntimeError):
        await counts.get(catalog, 1)
    assert await counts.get(catalog, 1) == {"books": 7}
