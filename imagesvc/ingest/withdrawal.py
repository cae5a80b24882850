"""``imagesvc books withdraw|restore``: take a book down everywhere, its public images included, and put it back.

The catalog's ``withdrawn`` flag hides a book from every listing, search, IIIF manifest, collection, the dataset
listing and the change feed (a ``Delete``; a ``Create`` on restore) on every node at its next read. The book's public
tiers are another matter: they are files on the image host (``pub/`` of the local store, served under ``/img/``
without a catalog read, or ``pub/`` of a bucket read anonymously behind a CDN), which no catalog check reaches. So
they are moved: each ``pub/`` object of the book is copied under the private prefix ``withdrawn/`` and then deleted
from ``pub/``; restoring moves each back, the same bytes under the same key, so every URL given out before serves
again. Nothing is re-derived, and masters and clean copies stay where they are.

Withdrawing flags the book first, then moves; restoring moves first, then clears the flag, so the catalog never
names an image that is not there. Both are idempotent: a run cut short is finished by running it again.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, field
from typing import Any

from imagesvc.catalog import Catalog, fold
from imagesvc.catalog import writes as w
from imagesvc.errors import NotFound
from imagesvc.storage import ObjectNotFound, ObjectStore

__all__ = ["MOVES_AT_ONCE", "WITHDRAWN_PREFIX", "Withdrawal", "public_keys", "restore", "withdraw"]

WITHDRAWN_PREFIX = "withdrawn/"  # private, like masters/ and clean/: only pub/ is ever anonymously readable
MOVES_AT_ONCE = 16  # objects moved concurrently: a 1,500-page book's ~4,500 tiers move in seconds, not minutes


@dataclass
class Withdrawal:
    """What one withdraw or restore did: the book, its state after, and its public objects."""

    book_id: str
    slug: str
    withdrawn: bool
    public_objects: int = 0  # the book's public tiers (pages and illustrations)
    moved: int = 0  # moved by this run (a rerun moves only what the last one left)
    missing: int = 0  # in neither place: lost from the store (``imagesvc marks rebake`` makes them anew)
    urls: list[str] = field(default_factory=list)  # their public URLs: what a CDN in front must purge on withdraw

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        state = "withdrawn" if self.withdrawn else "restored"
        where = f"moved to {WITHDRAWN_PREFIX}" if self.withdrawn else "moved back to pub/"
        lost = f", {self.missing} missing" if self.missing else ""
        return f"{self.slug}: {state}; {self.moved} of {self.public_objects} public images {where}{lost}"


def _book(catalog: Catalog, id_or_slug: str) -> dict[str, Any]:
    """The book by id or slug, withdrawn or not; ``NotFound`` when there is none."""
    row = catalog.query_one(
        "SELECT id, slug, withdrawn FROM books WHERE id = ? OR slug = ?", (fold(id_or_slug), fold(id_or_slug))
    )
    if row is None:
        raise NotFound(
            f"No book has the id or slug {id_or_slug!r}.",
            recovery=["List books with `imagesvc list_books --json` (withdrawn books keep their id and slug)."],
            details={"book_id": id_or_slug},
        )
    return row


def public_keys(catalog: Catalog, book_id: str) -> list[str]:
    """The ``pub/`` keys of every tier of the book's pages and illustrations, in key order."""
    return catalog.column(
        "SELECT r.public_key FROM renditions r JOIN pages p ON p.id = r.owner WHERE p.book_id = ?"
        " UNION SELECT r.public_key FROM renditions r JOIN illustrations i ON i.id = r.owner WHERE i.book_id = ?"
        " ORDER BY 1",
        (book_id, book_id),
    )


async def _move(store: ObjectStore, source: str, target: str) -> str:
    """Move one object: ``moved``; ``done`` when only the target holds it (a rerun); ``missing`` when neither does.
    The copy is written before the source is deleted, so a cut leaves the object in both places, never in none."""
    try:
        found = await store.get(source)
    except ObjectNotFound:
        return "done" if await store.head(target) is not None else "missing"
    await store.put(target, found.data, content_type=found.info.content_type)
    await store.delete(source)
    return "moved"


async def _move_all(store: ObjectStore, pairs: list[tuple[str, str]]) -> tuple[int, int]:
    """(moved, missing) after moving each ``(source, target)``, ``MOVES_AT_ONCE`` at a time."""
    slots = asyncio.Semaphore(MOVES_AT_ONCE)

    async def one(source: str, target: str) -> str:
        async with slots:
            return await _move(store, source, target)

    outcomes = await asyncio.gather(*(one(s, t) for s, t in pairs))
    return outcomes.count("moved"), outcomes.count("missing")


async def withdraw(catalog: Catalog, store: ObjectStore, book: str, image_base: str) -> Withdrawal:
    """Withdraw ``book`` (id or slug): flag it in the catalog, then move its public tiers under ``withdrawn/``."""
    row = _book(catalog, book)
    with catalog.transaction() as conn:
        w.withdraw_book(conn, row["id"])
    keys = public_keys(catalog, row["id"])
    moved, missing = await _move_all(store, [(key, WITHDRAWN_PREFIX + key) for key in keys])
    urls = [f"{image_base}/{key.removeprefix('pub/')}" for key in keys]
    return Withdrawal(row["id"], row["slug"], True, len(keys), moved, missing, urls)


async def restore(catalog: Catalog, store: ObjectStore, book: str, image_base: str) -> Withdrawal:
    """Restore a withdrawn ``book``: move its public tiers back to ``pub/``, then clear the catalog's flag."""
    row = _book(catalog, book)
    keys = public_keys(catalog, row["id"])
    moved, missing = await _move_all(store, [(WITHDRAWN_PREFIX + key, key) for key in keys])
    with catalog.transaction() as conn:
        w.restore_book(conn, row["id"])
    urls = [f"{image_base}/{key.removeprefix('pub/')}" for key in keys]
    return Withdrawal(row["id"], row["slug"], False, len(keys), moved, missing, urls)
