"""Catalog writes made by ingest and by operators: books, pages with their renditions, illustrations, collections.

Each function runs inside a transaction the caller opened with ``Catalog.transaction()``. The page-text index
differs by dialect (``page_text`` on SQLite, ``page_text_sql`` on PostgreSQL, whose connection says ``dialect``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

from imagesvc.catalog import page_text, page_text_sql

__all__ = [
    "delete_pages_not_in",
    "remove_illustration",
    "replace_collections",
    "restore_book",
    "upsert_book",
    "upsert_page",
    "upsert_pages",
    "withdraw_book",
]


def _now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def _page_index(conn: Any) -> ModuleType:
    """The page-text index module of the connection's dialect."""
    return page_text_sql if getattr(conn, "dialect", "sqlite") == "postgres" else page_text


def upsert_book(conn: sqlite3.Connection, book: dict[str, Any], source_hash: str) -> None:
    """Insert or update a book's metadata (pages are written separately)."""
    attribution = book["attribution"]
    conn.execute(
        """
        INSERT INTO books (id, slug, title, author, author_id, language, year, doi, translator, summary, chapters,
            edition, viewing_direction, license, institution, institution_url, item_url, withdrawn, source_hash,
            ingested_at, category, collection, work_id, edition_key, first_translation, edition_languages,
            translated_at)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (id) DO UPDATE SET slug = excluded.slug, title = excluded.title, author = excluded.author,
            author_id = excluded.author_id, language = excluded.language, year = excluded.year, doi = excluded.doi,
            translator = excluded.translator, summary = excluded.summary, chapters = excluded.chapters,
            edition = excluded.edition, viewing_direction = excluded.viewing_direction, license = excluded.license,
            institution = excluded.institution, institution_url = excluded.institution_url,
            item_url = excluded.item_url, withdrawn = 0, source_hash = excluded.source_hash,
            ingested_at = excluded.ingested_at, category = excluded.category, collection = excluded.collection,
            work_id = excluded.work_id, edition_key = excluded.edition_key,
            first_translation = excluded.first_translation, edition_languages = excluded.edition_languages,
            translated_at = excluded.translated_at
        """,
        (
            book["id"],
            book["slug"],
            book["title"],
            book["author"],
            book.get("author_id"),
            book["language"],
            book.get("year"),
            book.get("doi"),
            book.get("translator"),
            book.get("summary"),
            json.dumps(book.get("chapters", [])),
            json.dumps(book.get("edition", {})),
            book.get("viewing_direction", "left-to-right"),
            book.get("license"),
            attribution["institution"],
            attribution.get("institution_url"),
            attribution["item_url"],
            source_hash,
            _now(),
            book.get("category"),
            book.get("collection"),
            book.get("work_id"),
            book.get("edition_key"),
            int(bool(book.get("first_translation", False))),
            json.dumps(book.get("edition_languages", [])),
            book.get("translated_at"),
        ),
    )


def upsert_page(
    conn: sqlite3.Connection,
    page: dict[str, Any],
    renditions: dict[str, dict[str, Any]],
    illustrations: list[dict[str, Any]],
) -> None:
    """Replace one page row, the renditions of the page and its illustrations, and the illustration rows."""
    upsert_pages(conn, [(page, renditions, illustrations)])


PageRows = tuple[dict[str, Any], dict[str, dict[str, Any]], list[dict[str, Any]]]

_INSERT_PAGE = """
    INSERT INTO pages (id, book_id, number, ocr, translation, original, image_unavailable, unavailable_reason,
        master_key, master_sha256, master_format, derivation, width, height, master_bytes)
    VALUES (:id, :book_id, :number, :ocr, :translation, :original, :image_unavailable, :unavailable_reason,
        :master_key, :master_sha256, :master_format, :derivation, :width, :height, :master_bytes)
    ON CONFLICT (id) DO UPDATE SET ocr = excluded.ocr, translation = excluded.translation,
        original = excluded.original, image_unavailable = excluded.image_unavailable,
        unavailable_reason = excluded.unavailable_reason, master_key = excluded.master_key,
        master_sha256 = excluded.master_sha256, master_format = excluded.master_format,
        derivation = excluded.derivation, width = excluded.width, height = excluded.height,
        master_bytes = excluded.master_bytes
"""
_INSERT_ILLUSTRATION = """
    INSERT INTO illustrations (id, page_id, book_id, page_number, idx, bbox_x, bbox_y, bbox_w, bbox_h, type,
        description, museum_description, subjects, figures, symbols, year, phash, dhash, content_sha256)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""


def upsert_pages(conn: sqlite3.Connection, pages: Sequence[PageRows]) -> None:
    """Replace many pages at once (each ``(page, renditions, illustrations)`` as ``upsert_page`` takes them), with
    the same rows ``upsert_page`` writes page by page, in a few batched statements per book and table: what ingest
    writes for a whole book (on PostgreSQL a statement per page and table was a round trip each)."""
    by_book: dict[str, list[PageRows]] = {}
    for item in pages:
        by_book.setdefault(item[0]["book_id"], []).append(item)
    for book_id, items in by_book.items():
        _upsert_book_pages(conn, book_id, items)


def _upsert_book_pages(conn: sqlite3.Connection, book_id: str, items: list[PageRows]) -> None:
    pids = [page["id"] for page, _, _ in items]
    wanted = set(pids)
    old_illus = [
        (iid,)
        for iid, pid in conn.execute("SELECT id, page_id FROM illustrations WHERE book_id = ?", (book_id,)).fetchall()
        if pid in wanted
    ]
    conn.executemany("DELETE FROM renditions WHERE owner = ?", [(pid,) for pid in pids] + old_illus)
    conn.executemany("DELETE FROM illustrations WHERE id = ?", old_illus)
    index = _page_index(conn)
    numbers = [page["number"] for page, _, _ in items]
    index.unindex_pages(conn, book_id, numbers)
    conn.executemany(_INSERT_PAGE, [{"master_bytes": None, **page} for page, _, _ in items])
    index.index_pages(conn, book_id, [(page["number"], page) for page, _, _ in items])
    conn.executemany(
        "INSERT INTO renditions (owner, tier, clean_key, public_key, width, height, bytes, sha256,"
        " clean_bytes, clean_sha256, clean_width, clean_height) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                *(owner, tier, r["clean_key"], r["public_key"], r["width"], r["height"], r["bytes"], r["sha256"]),
                *(r.get("clean_bytes"), r.get("clean_sha256"), r.get("clean_width"), r.get("clean_height")),
            )
            for _, renditions, _ in items
            for owner, tiers in renditions.items()
            for tier, r in tiers.items()
        ],
    )
    conn.executemany(
        _INSERT_ILLUSTRATION,
        [
            (
                ill["id"],
                page["id"],
                book_id,
                page["number"],
                ill["index"],
                ill["bbox"]["x"],
                ill["bbox"]["y"],
                ill["bbox"]["width"],
                ill["bbox"]["height"],
                ill["type"],
                ill.get("description"),
                ill.get("museum_description"),
                json.dumps(ill.get("subjects", [])),
                json.dumps(ill.get("figures", [])),
                json.dumps(ill.get("symbols", [])),
                ill.get("year"),
                ill.get("phash"),
                ill.get("dhash"),
                ill.get("content_sha256"),
            )
            for page, _, illustrations in items
            for ill in illustrations
        ],
    )


def delete_pages_not_in(conn: sqlite3.Connection, book_id: str, numbers: list[int]) -> None:
    """Drop pages (and their renditions and illustrations) that the manifest no longer lists."""
    keep = set(numbers)
    for pid, number in conn.execute("SELECT id, number FROM pages WHERE book_id = ?", (book_id,)).fetchall():
        if number in keep:
            continue
        for (iid,) in conn.execute("SELECT id FROM illustrations WHERE page_id = ?", (pid,)).fetchall():
            conn.execute("DELETE FROM renditions WHERE owner = ?", (iid,))
        conn.execute("DELETE FROM renditions WHERE owner = ?", (pid,))
        _page_index(conn).unindex_page(conn, book_id, number)
        conn.execute("DELETE FROM pages WHERE id = ?", (pid,))


def replace_collections(conn: sqlite3.Connection, collections: list[dict[str, Any]]) -> None:
    """Replace the named collections (others stay) with their ordered illustration ids.

    Upserts rather than delete-and-insert, so two ingesters writing one collection at once (PostgreSQL) end with
    the one list the later commit wrote instead of a key conflict."""
    for position, col in enumerate(collections):
        conn.execute(
            "INSERT INTO collections (slug, title, description, cover_id, featured, position)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (slug) DO UPDATE SET title = excluded.title,"
            " description = excluded.description, cover_id = excluded.cover_id, featured = excluded.featured,"
            " position = excluded.position",
            (
                col["slug"],
                col["title"],
                col.get("description"),
                col.get("cover_id"),
                int(col.get("featured", False)),
                position,
            ),
        )
        for i, iid in enumerate(col["item_ids"]):
            conn.execute(
                "INSERT INTO collection_items (slug, position, illustration_id) VALUES (?, ?, ?)"
                " ON CONFLICT (slug, position) DO UPDATE SET illustration_id = excluded.illustration_id",
                (col["slug"], i, iid),
            )
        conn.execute(
            "DELETE FROM collection_items WHERE slug = ? AND position >= ?", (col["slug"], len(col["item_ids"]))
        )


def withdraw_book(conn: sqlite3.Connection, book_id: str) -> bool:
    """Hide a book (and so its pages and illustrations) from every listing; returns whether it existed."""
    return conn.execute("UPDATE books SET withdrawn = 1 WHERE id = ?", (book_id,)).rowcount > 0


def restore_book(conn: sqlite3.Connection, book_id: str) -> bool:
    """Show a withdrawn book again everywhere (the change feed logs a Create); returns whether it existed."""
    return conn.execute("UPDATE books SET withdrawn = 0 WHERE id = ?", (book_id,)).rowcount > 0


def remove_illustration(conn: sqlite3.Connection, illustration_id: str) -> bool:
    """Hide one illustration (a bad detection, a rights request); returns whether it existed."""
    return conn.execute("UPDATE illustrations SET removed = 1 WHERE id = ?", (illustration_id,)).rowcount > 0
