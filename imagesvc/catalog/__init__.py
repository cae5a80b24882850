"""The catalog: books, pages, renditions, illustrations and collections, in SQLite (``Catalog``, the embedded
default) or PostgreSQL (``imagesvc.catalog.postgres.PostgresCatalog``, one database for many nodes).

Both backends answer the one protocol below. Reads are indexed single-row or single-book lookups (well under a
millisecond); the event loop still never calls them directly but through ``catalog.gate`` (``imagesvc.catalog.gate``:
threads of the catalog's own and a deadline), since a hung server would stop the loop. Writes come from ingest, one
transaction per book. Rows come back
as plain dicts with JSON columns decoded. The SQL is written once, in the dialect both engines accept (``?``
parameters; PostgreSQL's backend translates them); the few dialect-specific queries branch on ``catalog.dialect``.
Open the configured backend with ``imagesvc.catalog.backends.open_catalog(settings)``.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from imagesvc.catalog import page_text
from imagesvc.catalog.gate import DEFAULT_DEADLINE, CatalogGate
from imagesvc.catalog.page_rank import SearchWork
from imagesvc.catalog.schema import SCHEMA_VERSION, migrate
from imagesvc.catalog.text_fold import Word

__all__ = ["Catalog", "book_id_for", "fold", "illustration_id", "illustration_key", "page_id"]

_JSON_COLUMNS = ("chapters", "edition", "subjects", "figures", "symbols", "edition_languages")


def fold(identifier: str) -> str:
    """An id or slug as stored: ids are lower-case hex and slugs lower-case by construction (the manifest schema),
    so a look-up folds case and an upper-case hex id, as some clients write them, still finds its book."""
    return identifier.lower()


def book_id_for(slug: str) -> str:
    """The opaque id of a book whose manifest gives none: stable, derived from the slug."""
    return hashlib.sha256(f"book:{slug}".encode()).hexdigest()[:16]


def page_id(book_id: str, number: int) -> str:
    return f"{book_id}-{number}"


def illustration_id(book_id: str, number: int, index: int) -> str:
    """``{pageId}:{index}``, the illustration id clients of the reference service know."""
    return f"{page_id(book_id, number)}:{index}"


def illustration_key(illustration_id: str) -> tuple[str, int, int]:
    """``(book_id, page number, index)`` of an illustration id: the catalog's order of illustrations.

    Raises ``ValueError`` for a string that is not an illustration id."""
    page, colon, index = illustration_id.rpartition(":")
    book, dash, number = page.rpartition("-")
    if not (colon and dash and book):
        raise ValueError(f"not an illustration id: {illustration_id!r}")
    return book, int(number), int(index)


def _row(row: sqlite3.Row | None) -> dict[str, Any] | None:
    if row is None:
        return None
    out = dict(row)
    for key in _JSON_COLUMNS:
        if key in out and isinstance(out[key], str):
            out[key] = json.loads(out[key])
    return out


def _use_wal(conn: sqlite3.Connection, wait: float = 5.0) -> None:
    """Put the file in WAL mode. Turning a new file to WAL needs a lock that another process opening (and
    migrating) it at the same moment may hold, and SQLite answers "locked" then without its busy handler: retry."""
    deadline = time.monotonic() + wait
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


class Catalog:
    """One connection to the catalog file (WAL mode), migrated to the current schema on open. ``gate`` runs its
    calls for the event loop, one at a time (the one connection serialises them anyway), under ``deadline`` s."""

    dialect = "sqlite"

    def __init__(self, path: Path | str, *, deadline: float = DEFAULT_DEADLINE, guard: bool = False) -> None:
        self.gate = CatalogGate(self.ping, deadline=deadline, threads=1, guard=guard)
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._raw = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._raw.row_factory = sqlite3.Row
        self._raw.execute("PRAGMA busy_timeout = 5000")
        _use_wal(self._raw)
        self._raw.execute("PRAGMA foreign_keys = ON")
        self.schema_version = migrate(self._raw)

    @property
    def _conn(self) -> sqlite3.Connection:
        """The connection, for a call made off the event loop (``gate.off_loop`` says so otherwise)."""
        self.gate.off_loop()
        return self._raw

    def close(self) -> None:
        self.gate.close()
        self._raw.close()

    def ping(self) -> None:
        """Return once a read of the books table returns (what the gate's probe and readiness ask)."""
        self.scalar("SELECT count(*) FROM (SELECT 1 FROM books LIMIT 1) AS one")

    @contextmanager
    def transaction(self, *, search: bool = True) -> Iterator[sqlite3.Connection]:
        """A write transaction; everything inside commits together or not at all. ``search=False`` says the write
        changes nothing search state reads (API keys): PostgreSQL then leaves its change counter alone."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def query_one(self, sql: str, args: Iterable[Any] = ()) -> dict[str, Any] | None:
        return _row(self._conn.execute(sql, tuple(args)).fetchone())

    def query_all(self, sql: str, args: Iterable[Any] = ()) -> list[dict[str, Any]]:
        return [_row(r) for r in self._conn.execute(sql, tuple(args)).fetchall()]  # type: ignore[misc]

    def query_in(self, sql: str, values: Sequence[Any], size: int = 500) -> Iterator[dict[str, Any]]:
        """Rows of ``sql`` whose ``IN ({marks})`` is filled with ``values``, asked ``size`` at a time (SQLite bounds
        the parameters of one statement)."""
        for start in range(0, len(values), size):
            chunk = values[start : start + size]
            yield from self.query_all(sql.format(marks=",".join("?" * len(chunk))), chunk)

    def scalar(self, sql: str, args: Iterable[Any] = ()) -> Any:
        """The first column of the first row (None when there is no row)."""
        row = self._conn.execute(sql, tuple(args)).fetchone()
        return None if row is None else row[0]

    def column(self, sql: str, args: Iterable[Any] = ()) -> list[Any]:
        """The first column of every row."""
        return [r[0] for r in self._conn.execute(sql, tuple(args)).fetchall()]

    def data_version(self) -> Any:
        """A value that changes when another connection commits a catalog write (search state rebuilds on it)."""
        return self.scalar("PRAGMA data_version")

    def change_stamp(self) -> Any:
        """A value that changes with every committed catalog write that counts can see, this connection's own
        included (``data_version`` moves only for other connections' commits)."""
        return self.data_version(), self._conn.total_changes

    def tuples(self, sql: str, args: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        """Every row as a plain tuple (JSON columns left as text): many small rows without a dict each."""
        cursor = self._conn.cursor()
        cursor.row_factory = None
        return cursor.execute(sql, tuple(args)).fetchall()

    def stream(self, sql: str, args: Iterable[Any] = ()) -> Iterator[tuple[Any, ...]]:
        """The rows of a large read one at a time, as plain tuples with JSON columns left as text.

        For table scans in a worker thread: nothing piles up, so the garbage collector has no heap of row objects
        to walk while holding the interpreter lock the event loop needs."""
        cursor = self._conn.cursor()
        cursor.row_factory = None
        yield from cursor.execute(sql, tuple(args))

    # -- books and pages -------------------------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """Numbers of live books, pages, pages without an image, illustrations and collections.

        Read from ``book_counts`` (migration 11: one row per book, kept by triggers on every write), one row per
        book rather than one per page: counting the pages themselves was 2.3-8.6 s of a core at 4.5 million."""
        row = self.tuples(
            "SELECT count(*), coalesce(sum(c.pages), 0), coalesce(sum(c.pages_without_image), 0),"
            " coalesce(sum(c.illustrations), 0) FROM books b LEFT JOIN book_counts c ON c.book_id = b.id"
            " WHERE b.withdrawn = 0"
        )[0]
        books, pages, without_image, illustrations = (int(v) for v in row)
        return {
            "books": books,
            "pages": pages,
            "pages_without_image": without_image,
            "illustrations": illustrations,
            "collections": self.scalar("SELECT count(*) FROM collections"),
            "schema_version": SCHEMA_VERSION,
        }

    def counted(self) -> dict[str, int]:
        """The same numbers as ``counts`` counted from the rows themselves (a scan of every page: for tests and
        checks of ``book_counts``, never for serving)."""
        q = self.scalar
        return {
            "books": q("SELECT count(*) FROM books WHERE withdrawn = 0"),
            "pages": q("SELECT count(*) FROM pages p JOIN books b ON b.id = p.book_id WHERE b.withdrawn = 0"),
            "pages_without_image": q(
                "SELECT count(*) FROM pages p JOIN books b ON b.id = p.book_id"
                " WHERE b.withdrawn = 0 AND p.image_unavailable = 1"
            ),
            "illustrations": q(
                "SELECT count(*) FROM illustrations i JOIN books b ON b.id = i.book_id "
                "WHERE b.withdrawn = 0 AND i.removed = 0"
            ),
            "collections": q("SELECT count(*) FROM collections"),
            "schema_version": SCHEMA_VERSION,
        }

    def list_books(self, *, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        """Live books ordered by title, and the total count."""
        total = self.scalar("SELECT count(*) FROM books WHERE withdrawn = 0")
        rows = self.query_all(
            "SELECT b.*, (SELECT count(*) FROM pages p WHERE p.book_id = b.id) AS page_count,"
            " (SELECT count(*) FROM pages p WHERE p.book_id = b.id AND p.translation IS NOT NULL) AS translated_pages"
            " FROM books b WHERE withdrawn = 0 ORDER BY title, id LIMIT ? OFFSET ?",
            (limit, offset),
        )
        return rows, total

    def find_book(self, id_or_slug: str, *, counts: bool = True) -> dict[str, Any] | None:
        """A live book by opaque id or slug; ``counts`` adds ``page_count`` and ``translated_pages``."""
        extra = (
            ", (SELECT count(*) FROM pages p WHERE p.book_id = b.id) AS page_count,"
            " (SELECT count(*) FROM pages p WHERE p.book_id = b.id AND p.translation IS NOT NULL) AS translated_pages"
            if counts
            else ""
        )
        return self.query_one(
            f"SELECT b.*{extra} FROM books b WHERE (id = ? OR slug = ?) AND withdrawn = 0", (fold(id_or_slug),) * 2
        )

    def pages(self, book_id: str, first: int | None = None, last: int | None = None) -> list[dict[str, Any]]:
        """A book's pages in order, optionally limited to the inclusive range ``first..last``."""
        return self.query_all(
            "SELECT * FROM pages WHERE book_id = ? AND number >= ? AND number <= ? ORDER BY number",
            (book_id, first if first is not None else -(2**62), last if last is not None else 2**62),
        )

    def page_list(self, book_id: str) -> list[dict[str, Any]]:
        """A book's pages in order without their text: ``has_ocr``, ``has_translation`` and ``has_original`` say
        which texts a page holds (listing pages must not read ~5 KB of text a page).

        On SQLite the listing is the ``pages_listing`` index alone and which texts a page holds comes from the page
        index's row ids (one per text): testing the columns for NULL read every page row (1.2 MB a 300-page book;
        17-120 ms at 750,000 pages when the file is larger than the memory caching it)."""
        rows = self.query_all(
            "SELECT id, book_id, number, image_unavailable, unavailable_reason, width, height"
            " FROM pages INDEXED BY pages_listing WHERE book_id = ? ORDER BY number",
            (book_id,),
        )
        held = page_text.texts_held(self, book_id)
        for row in rows:
            fields = held.get(row["number"], ())
            row.update({f"has_{field}": int(field in fields) for field in page_text.FIELDS})
        return rows

    def search_pages(
        self,
        book_id: str,
        words: list[Word],
        fields: list[str],
        *,
        limit: int,
        offset: int,
        work: SearchWork | None = None,
    ) -> tuple[list[tuple[int, float, tuple[str, ...]]], int]:
        """``([(page number, score, texts holding a word)], total)``: the book's pages whose ``fields`` hold every
        word, best first (``page_text.search``); ``work`` counts and bounds its work (``page_rank.SearchWork``)."""
        return page_text.search(self._conn, book_id, words, fields, limit=limit, offset=offset, work=work)

    def page(self, book_id: str, number: int) -> dict[str, Any] | None:
        return self.query_one("SELECT * FROM pages WHERE book_id = ? AND number = ?", (book_id, number))

    def pages_numbered(self, book_id: str, numbers: Iterable[int]) -> dict[int, dict[str, Any]]:
        """``{number: page row}`` for the listed pages of a book that exist, in one query (on PostgreSQL a query is
        a round trip: the 20 hits of a search inside a book were 20 of them, 77 ms p50 at 400,000 pages)."""
        wanted = sorted(set(numbers))
        if not wanted:
            return {}
        marks = ", ".join("?" * len(wanted))
        rows = self.query_all(f"SELECT * FROM pages WHERE book_id = ? AND number IN ({marks})", (book_id, *wanted))
        return {row["number"]: row for row in rows}

    def page_image(self, id_or_slug: str, number: int, tier: str) -> dict[str, Any] | None:
        """Everything ``/image`` needs for one page tier, in one indexed look-up; None when no live book matches.

        Keys: the book's ``id``, ``slug``, ``title``, ``year``, ``doi`` and ``institution``; the page's ``page_id``
        (None when the book has no such page), ``image_unavailable`` and ``unavailable_reason``; the tier's
        ``clean_key``, ``public_key`` (None when the tier was never rendered) and ``sha256``.
        """
        return self.query_one(
            "SELECT b.id, b.slug, b.title, b.year, b.doi, b.institution, p.id AS page_id, p.image_unavailable,"
            " p.unavailable_reason, r.clean_key, r.public_key, r.sha256"
            " FROM books b LEFT JOIN pages p ON p.book_id = b.id AND p.number = ?"
            " LEFT JOIN renditions r ON r.owner = p.id AND r.tier = ?"
            " WHERE (b.id = ? OR b.slug = ?) AND b.withdrawn = 0",
            (number, tier, fold(id_or_slug), fold(id_or_slug)),
        )

    def page_numbers(self, book_id: str) -> list[int]:
        return self.column("SELECT number FROM pages WHERE book_id = ? ORDER BY number", (book_id,))

    def renditions(self, owners: Iterable[str]) -> dict[str, dict[str, dict[str, Any]]]:
        """``{owner: {tier: rendition row}}`` for page or illustration ids."""
        owners = list(owners)
        out: dict[str, dict[str, dict[str, Any]]] = {owner: {} for owner in owners}
        for row in self.query_in("SELECT * FROM renditions WHERE owner IN ({marks})", owners):
            out[row["owner"]][row["tier"]] = row
        return out

    # -- illustrations ---------------------------------------------------------------------------------------------

    def illustration(self, illustration_id: str) -> dict[str, Any] | None:
        """A live illustration (not removed, its book not withdrawn)."""
        return self.query_one(
            "SELECT i.* FROM illustrations i JOIN books b ON b.id = i.book_id "
            "WHERE i.id = ? AND i.removed = 0 AND b.withdrawn = 0",
            (fold(illustration_id),),
        )

    def book_illustrations(self, book_id: str) -> list[dict[str, Any]]:
        return self.query_all(
            "SELECT * FROM illustrations WHERE book_id = ? AND removed = 0 ORDER BY page_number, idx", (book_id,)
        )

    def live_illustrations(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The live illustrations among ``ids``, by id (missing, removed or withdrawn ones are absent)."""
        ids = [fold(i) for i in ids]
        sql = (
            "SELECT i.* FROM illustrations i JOIN books b ON b.id = i.book_id WHERE i.id IN ({marks})"
            " AND i.removed = 0 AND b.withdrawn = 0"
        )
        return {row["id"]: row for row in self.query_in(sql, ids)}

    # -- collections -----------------------------------------------------------------------------------------------

    def collections(self) -> list[dict[str, Any]]:
        """Every collection with its ordered item ids (unresolved)."""
        rows = self.query_all("SELECT * FROM collections ORDER BY position, slug")
        for row in rows:
            row["item_ids"] = self._item_ids(row["slug"])
        return rows

    def collection(self, slug: str) -> dict[str, Any] | None:
        slug = fold(slug)
        row = self.query_one("SELECT * FROM collections WHERE slug = ?", (slug,))
        if row is not None:
            row["item_ids"] = self._item_ids(slug)
        return row

    def _item_ids(self, slug: str) -> list[str]:
        return self.column("SELECT illustration_id FROM collection_items WHERE slug = ? ORDER BY position", (slug,))
