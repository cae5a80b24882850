"""Catalog generations of a serving node: pinned per request, replaced while serving, closed when the last pin goes.

A node that follows catalog snapshots (``imagesvc.web.follow``) holds one ``Generation`` at a time: the catalog
connection, the search engine over it (its own immutable search snapshots) and the folder they were read from.
``Generations.swap`` makes a new generation current in one step on the event loop; a request pins the generation
current when it starts (``Generations.pinned``) and reads only that one until it ends, so no request mixes two
catalogs. A replaced generation is closed when its last pin is released (at once when nothing pins it): a reference
count, not a grace period, so a long request is never cut off and an idle old catalog is never kept open.
``Services.follow(generations.active)`` makes ``services.catalog`` and ``services.search`` read the pinned one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Generation", "Generations"]

log = logging.getLogger("imagesvc.catalog.snapshots")

_PINNED: ContextVar[Generation | None] = ContextVar("imagesvc_catalog_generation", default=None)


@dataclass(eq=False)
class Generation:
    """One catalog snapshot in use: ``version`` names it ("" for the node's own catalog)."""

    version: str
    catalog: Any
    engine: Any
    folder: Path | None = None
    on_close: Callable[[Generation], None] | None = None  # closes the catalog, removes the folder
    refs: int = 0
    retired: bool = False
    closed: bool = field(default=False, repr=False)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.on_close is not None:
            try:
                self.on_close(self)
            except Exception:  # cleanup must not take the serving loop down; the next start removes leftovers
                log.exception("closing catalog snapshot %s failed", self.version)


class Generations:
    """The current generation and the pins held on older ones. Use from the event loop thread only."""

    def __init__(self, first: Generation) -> None:
        self.current = first

    def active(self) -> Generation:
        """The generation this request pinned, else the current one."""
        return _PINNED.get() or self.current

    def active_pair(self) -> tuple[Any, Any]:
        """(catalog, search engine) of the active generation: what ``Services.follow`` reads."""
        generation = self.active()
        return generation.catalog, generation.engine

    @contextmanager
    def pinned(self) -> Iterator[Generation]:
        """Pin the current generation for the code inside (one request), and release it after."""
        generation = self.current
        generation.refs += 1
        token = _PINNED.set(generation)
        try:
            yield generation
        finally:
            _PINNED.reset(token)
            generation.refs -= 1
            if generation.retired and generation.refs == 0:
                generation.close()

    def swap(self, new: Generation) -> Generation:
        """Make ``new`` current; the old one closes now if unpinned, else when its last pin is released."""
        old, self.current = self.current, new
        old.retired = True
        if old.refs == 0:
            old.close()
        return old

    def close(self) -> None:
        """Close the current generation (app shutdown: no request runs any more)."""
        self.current.retired = True
        self.current.close()
