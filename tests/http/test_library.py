"""``GET /api/books/library`` and list_books as the spec describes them, on the demo library's catalogue fields."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from imagesvc.catalog import Catalog
from imagesvc.catalog.writes import withdraw_book

SPECULUM, GART, MINES, SEFER = (
    "demo-speculum-fornacum",
    "demo-gart-der-kreuter",
    "demo-traite-des-mines",
    "demo-sefer-maarekhet-ha-kokhavim",
)
ROW_FIELDS = {"id", "slug", "title", "author", "author_id", "language", "year", "translation_progress"}


async def library(client: TestClient, status: int = 200, **params: Any) -> dict[str, Any]:
    resp = await client.get("/api/books/library", params={k: str(v) for k, v in params.items()})
    body = await resp.json()
    assert resp.status == status, body
    if status == 200:
        assert isinstance(body["total"], int) and all(row.keys() >= ROW_FIELDS for row in body["items"])
    return body


def slugs(body: dict[str, Any]) -> list[str]:
    return [row["slug"] for row in body["items"]]


async def test_author_id_returns_exactly_that_persons_books_and_echoes_the_canonical_author(
    client: TestClient,
) -> None:
    body = await library(client, author_id="Claude Ferrandier")
    assert slugs(body) == [MINES] and body["total"] == 1
    assert body["author"] == {"author_id": "claude-ferrandier", "name": "Claude Ferrandier"}
    assert (await library(client, author_id="claude"))["total"] == 0  # no prefix or substring match
    nobody = await library(client, author_id="no-such-author")
    assert nobody["items"] == [] and nobody["total"] == 0 and nobody["author"]["name"] is None


async def test_year_range_never_matches_books_without_a_year(client: TestClient) -> None:
    assert set(slugs(await library(client, year_from=1600))) == {SPECULUM, MINES}
    assert slugs(await library(client, year_to=1600)) == [SEFER]
    assert slugs(await library(client, year_from=1590, year_to=1620, sort="date_asc")) == [SEFER, SPECULUM]
    assert GART not in slugs(await library(client, year_from=-3000, year_to=2100))


async def test_catalogue_filters(client: TestClient) -> None:
    assert slugs(await library(client, language="latin")) == [SPECULUM]
    assert set(slugs(await library(client, category="Alchemy"))) == {SPECULUM, MINES}
    assert set(slugs(await library(client, collection="demo-early-science"))) == {SPECULUM, GART, MINES}
    herbals = "Demo Archive of Invented Herbals"
    assert slugs(await library(client, library=herbals)) == [GART]
    assert slugs(await library(client, library="demo-archive-of-invented-herbals")) == [GART]
    assert (await library(client, library="Nowhere"))["total"] == 0
    assert (await library(client, has_translation="true"))["total"] == 4
    assert (await library(client, has_translation="false"))["total"] == 0
    assert set(slugs(await library(client, first_translation="true"))) == {SPECULUM, SEFER}
    assert set(slugs(await library(client, first_translation="false"))) == {GART, MINES}
    assert slugs(await library(client, has_edition="la")) == [SPECULUM]
    assert (await library(client, has_edition="en"))["total"] == 4
    row = (await library(client, author_id="johannes-balthasar-kesslerus"))["items"][0]
    assert slugs(await library(client, work_id=row["work_id"])) == [SPECULUM]
    assert slugs(await library(client, edition_key=row["edition_key"])) == [SPECULUM]
    both = await library(client, category="alchemy", year_to=1620)
    assert slugs(both) == [SPECULUM] and both["total"] == 1


async def test_search_is_relevance_ranked_over_titles_and_authors(client: TestClient) -> None:
    assert slugs(await library(client, search="Kesslerus")) == [SPECULUM]
    assert slugs(await library(client, search="traite mines"))[0] == MINES  # diacritics folded, best match first
    assert slugs(await library(client, search="Grünwald"))[:1] == [GART]  # last word as a prefix
    assert (await library(client, search="furnaces"))["total"] == 0  # summaries are not searched
    for hostile in ('"', "NEAR(a b)", "title:*", "a OR", "*", "'; DROP TABLE books; --"):
        body = await library(client, search=hostile)
        assert body["total"] == len(body["items"])


async def test_sorts(client: TestClient) -> None:
    assert slugs(await library(client)) == [MINES, SPECULUM, SEFER, GART]  # recent-translation; none last
    titles = [r["title"] for r in (await library(client, sort="title-asc"))["items"]]
    assert titles == sorted(titles, key=str.casefold)
    assert [r["title"] for r in (await library(client, sort="title-desc"))["items"]] == titles[::-1]
    assert slugs(await library(client, sort="date_asc")) == [SEFER, SPECULUM, MINES, GART]
    assert slugs(await library(client, sort="date_desc")) == [MINES, SPECULUM, SEFER, GART]
    assert set(slugs(await library(client, sort="recent"))) == {SPECULUM, GART, MINES, SEFER}


async def test_paging_envelope_and_limits(client: TestClient) -> None:
    first = await library(client, limit=3)
    rest = await library(client, limit=3, skip=3)
    assert (first["total"], first["has_more"], rest["has_more"], rest["offset"]) == (4, True, False, 3)
    assert {"items", "total", "limit", "offset", "has_more", "next_cursor"} <= first.keys()
    assert len(set(slugs(first) + slugs(rest))) == 4
    for params in ({"limit": 201}, {"skip": -1}, {"sort": "newest"}, {"offset": 3}, {"has_translation": "maybe"}):
        body = await library(client, 400, **params)
        assert body["error"] == "invalid_request", params


async def test_withdrawn_books_leave_the_catalogue(client: TestClient, data_dir: Path) -> None:
    row = (await library(client, author_id="claude-ferrandier"))["items"][0]
    catalog = Catalog(data_dir / "catalog.sqlite3")
    with catalog.transaction() as conn:
        withdraw_book(conn, row["id"])
    catalog.close()
    assert (await library(client, author_id="claude-ferrandier"))["total"] == 0
    assert (await library(client))["total"] == 3


@pytest.mark.parametrize("path", ["/api/books", "/api/books/library"])
async def test_list_all_books_stays(client: TestClient, path: str) -> None:
    resp = await client.get(path)
    assert resp.status == 200 and (await resp.json())["total"] == 4
