"""How one search engine follows the published index of one kind (``imagesvc.search.published``): which catalog
row to load, where from, and which versions it has refused."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from imagesvc.errors import ImagesvcError
from imagesvc.search.published import FOLDERS, current, drop_cached, fetch
from imagesvc.storage import ObjectStore, StoreUnavailable

__all__ = ["Follower"]

log = logging.getLogger("imagesvc.search.published")

RETRY_SECONDS = 10.0  # after the store failed to deliver an index


class Follower:
    """How one engine follows the published index of one ``kind``: which row to load, where from, and what it has
    refused. With PostgreSQL (``only``) the published index is the only source; on SQLite a data dir that holds an
    index of its own (the embedded default, where ``imagesvc index`` writes the node's data dir) keeps using it."""

    def __init__(self, kind: str, catalog: Any, store: ObjectStore, data_dir: Path, cache: Path) -> None:
        self.kind, self.catalog, self.store = kind, catalog, store
        self.data_dir, self.cache = Path(data_dir), Path(cache)
        self.only = getattr(catalog, "dialect", "sqlite") == "postgres"
        self.digest: str | None = None  # of the index in service
        self.rejected: dict[str, str] = {}  # digest -> why it was refused
        self._retry: dict[str, float] = {}  # digest -> when to try again (the store was unreachable)
        self._said_none = False
        self.last: dict[str, Any] | None = None  # the row the last ``row()`` read (for reports made on the loop)

    def local(self) -> bool:
        """Whether the index comes from the data dir (SQLite with an index of its own there)."""
        return not self.only and (self.data_dir / FOLDERS[self.kind] / "current.json").exists()

    def row(self) -> dict[str, Any] | None:
        """The catalog's current row (one indexed read); logs once when PostgreSQL names none."""
        row = self.last = current(self.catalog, self.kind)
        if row is None and self.only and not self._said_none:
            self._said_none = True
            log.warning(
                "no %s index is published in the catalog: run `imagesvc index` (%s)", self.kind, _WITHOUT[self.kind]
            )
        return row

    async def current_row(self) -> dict[str, Any] | None:
        """``row()`` from the event loop: through the catalog's gate (its threads, its deadline)."""
        return await self.catalog.gate.run(self.row)  # type: ignore[no-any-return]

    def wanted(self, row: dict[str, Any] | None) -> bool:
        """Whether ``row`` names an index to fetch now (not the one in service, not one refused)."""
        if row is None or row["digest"] == self.digest or row["digest"] in self.rejected:
            return False
        return time.monotonic() >= self._retry.get(row["digest"], 0.0)

    def retrying(self, row: dict[str, Any] | None) -> bool:
        """Whether ``row``'s index failed to arrive for a reason of the store's, and is to be tried again."""
        return row is not None and row["digest"] in self._retry and row["digest"] != self.digest

    async def fetch(self, row: dict[str, Any]) -> Path:
        return await fetch(self.store, row, self.cache)

    def loaded(self, row: dict[str, Any]) -> None:
        """``row``'s index is in service now: note it and drop older cached versions (blocking file work)."""
        self.digest = row["digest"]
        self._retry.pop(row["digest"], None)
        drop_cached(self.cache, self.kind, row["digest"])
        log.info("%s index sha256:%s in service (published %s)", self.kind, row["digest"][:12], row["built_at"])

    def refuse(self, row: dict[str, Any], exc: BaseException) -> None:
        """``row``'s index could not be fetched or loaded: keep the one in service, do not try it again."""
        why = exc.message if isinstance(exc, ImagesvcError) else f"{type(exc).__name__}: {exc}"
        kept = f"sha256:{self.digest[:12]}" if self.digest else "none"
        if isinstance(exc, StoreUnavailable):  # not the index's fault: try again a little later
            self._retry[row["digest"]] = time.monotonic() + RETRY_SECONDS
            log.warning("published %s index not fetched yet, keeping %s: %s", self.kind, kept, why)
            return
        self.rejected[row["digest"]] = why
        log.error("published %s index sha256:%s refused, keeping %s: %s", self.kind, row["digest"][:12], kept, why)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": "data dir" if self.local() else "published", "digest": self.digest}
        if self.rejected:
            out["refused"] = dict(self.rejected)
        return out


_WITHOUT = {
    "text": "search ranks by keywords only until then",
    "clip": "no CLIP ranking until then",
    "blocks": "search by image finds nothing until then",
}
