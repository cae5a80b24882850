"""Check that gallery keyword ranking gives what the reads before migration 10 gave, on a generated catalog: the
scores of the statements the gallery used before (FTS5 joined to illustrations and sorted; PostgreSQL's ts_rank over
the vector computed per row) against ``keyword_hits`` mapped to table rows, and the ranked pages of both. On
PostgreSQL also the read of migrations 10-11 (a row per match with its text id, over the stored vector) against
migration 12's (search numbers and ranks in one row, mapped through the table's numbers).

    .venv/bin/python benchmarks/gallery_keyword_check.py /tmp/gallery-scale/sqlite/catalog.sqlite3
    .venv/bin/python benchmarks/gallery_keyword_check.py postgresql://...   # a running catalog_generate cluster

Prints one line a query; raises on the first difference.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from imagesvc.catalog import Catalog
from imagesvc.search.engine import SearchEngine
from imagesvc.search.ranking import GalleryTable, Query, rank
from imagesvc.search.text import STOP_WORDS, fts_expression, keyword_hits

QUERIES = [
    Query(text="gold"),
    Query(text="philosophers stone", type="map"),
    Query(text="tincture", year_from=1500, year_to=1600),
    Query(text="furnace", offset=40),
    Query(text="alembic", max_per_book=1, limit=50, offset=100),
    Query(text="gold furnace", fold_duplicates=True),
]


def before_sqlite(catalog: Any, query: str, limit: int = 100_000) -> dict[str, float]:
    rows = catalog.query_all(
        "SELECT i.id AS id, bm25(illustrations_fts, 1.0, 0.6, 2.0, 2.0, 2.0) AS rank FROM illustrations_fts"
        " JOIN illustrations i ON i.rowid = illustrations_fts.rowid"
        " WHERE illustrations_fts MATCH ? ORDER BY rank LIMIT ?",
        (fts_expression(query), limit),
    )
    best = -rows[0]["rank"] or 1.0
    return {r["id"]: max(-r["rank"] / best, 1e-6) for r in rows}


def before_postgres(catalog: Any, query: str, limit: int = 100_000) -> dict[str, float]:
    words = [w.lower() for w in re.findall(r"\w+", query)][:32]
    words = [w for w in words if w not in STOP_WORDS] or words
    terms = ["'" + w + "'" for w in words]
    terms[-1] += ":*"
    doc = "imagesvc_illustration_doc(i.description, i.museum_description, i.subjects, i.figures, i.symbols)"
    rows = catalog.query_all(
        f"SELECT i.id AS id, ts_rank('{{0.05, 0.3, 0.5, 1.0}}', {doc}, q) AS rank FROM illustrations i,"
        f" to_tsquery('simple', imagesvc_fold(?)) AS q WHERE {doc} @@ q ORDER BY rank DESC, i.id LIMIT ?",
        (" | ".join(terms), limit),
    )
    best = rows[0]["rank"] or 1.0
    return {r["id"]: max(r["rank"] / best, 1e-6) for r in rows}


def before_postgres_ids(catalog: Any, query: str, limit: int = 100_000) -> dict[str, float]:
    """The read of migrations 10-11: one row per match, its text id and ts_rank over the stored vector."""
    words = [w.lower() for w in re.findall(r"\w+", query)][:32]
    words = [w for w in words if w not in STOP_WORDS] or words
    terms = ["'" + w + "'" for w in words]
    terms[-1] += ":*"
    rows = catalog.tuples(
        "SELECT i.id, ts_rank('{0.05, 0.3, 0.5, 1.0}', i.search_doc, q) AS rank FROM illustrations i,"
        " to_tsquery('simple', imagesvc_fold(?)) AS q WHERE i.search_doc @@ q LIMIT ?",
        (" | ".join(terms), limit + 1),
    )
    best = max(rank for _, rank in rows) or 1.0
    return {iid: max(rank / best, 1e-6) for iid, rank in rows}


def main() -> None:
    if sys.argv[1].startswith("postgresql"):
        from imagesvc.catalog.postgres import PostgresCatalog

        catalog: Any = PostgresCatalog(sys.argv[1])
        before = before_postgres
    else:
        catalog, before = Catalog(sys.argv[1]), before_sqlite
    table = GalleryTable.from_catalog(catalog)
    for q in QUERIES:
        assert q.text is not None
        old = before(catalog, q.text)
        rows, scores = SearchEngine._hit_rows(table, keyword_hits(catalog, q.text), catalog)
        new = dict(zip([table.ids[r] for r in rows.tolist()], scores.tolist(), strict=True))
        assert {k: v for k, v in old.items() if table.row_of(k) is not None} == new, q
        if catalog.dialect == "postgres":
            hits = keyword_hits(catalog, q.text)
            assert hits.rowids is not None and hits.seq == table.seq and table.exact  # mapped by number
            assert {k: v for k, v in before_postgres_ids(catalog, q.text).items() if table.row_of(k) is not None} == new
        a, b = rank(table, q, None, None, old), rank(table, q, None, None, (rows, scores))
        assert (a.rows, a.total, a.similarity, a.text, a.duplicates, a.more) == (
            b.rows, b.total, b.similarity, b.text, b.duplicates, b.more
        ), q  # fmt: skip
        print(f"{q.text!r}: {len(new)} matches, the same scores and the same page ({a.total} results)")


if __name__ == "__main__":
    main()
