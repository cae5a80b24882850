"""The spec's addresses, taken literally: REST and JSON-RPC under {base_url} (/api), llms.txt and IIIF at the root."""

from __future__ import annotations

from aiohttp.test_utils import TestClient

from tests.http.conftest import MakeClient

SPEC_CALL = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "list_books", "arguments": {"limit": 2}},
}


async def test_a_spec_shaped_tools_call_answers_at_api_mcp(client: TestClient) -> None:
    """The spec's request: POST {base_url}/mcp with only Content-Type: application/json."""
    resp = await client.post("/api/mcp", json=SPEC_CALL, headers={"Content-Type": "application/json"})
    body = await resp.json()
    assert resp.status == 200
    assert body["jsonrpc"] == "2.0" and body["id"] == 1
    assert not body["result"].get("isError")
    assert body["result"]["structuredContent"]["items"]


async def test_rest_routes_live_under_the_base_path_and_not_at_the_root(client: TestClient) -> None:
    assert (await client.get("/api/books")).status == 200
    for stray in ("/books", "/mcp", "/gallery", "/image", "/openapi.json"):
        resp = await client.get(stray)
        assert resp.status == 404, stray
        assert (await resp.json())["error"] == "not_found"


async def test_site_root_routes_stay_at_the_root(client: TestClient) -> None:
    for path in ("/llms.txt", "/health"):
        assert (await client.get(path)).status == 200, path
    assert (await client.get("/api/llms.txt")).status == 404
    text = await (await client.get("/llms.txt")).text()
    origin = str(client.make_url("")).rstrip("/")
    assert f"Base URL: {origin}/api " in text
    assert f"POST {origin}/api/mcp" in text


async def test_the_base_path_is_a_setting(make_client: MakeClient) -> None:
    client = await make_client(base_path="/v2/library")
    for _ in range(3):  # the quota route stays free under any base path
        assert (await client.get("/v2/library/rate_limit")).status == 200
    books = await client.get("/v2/library/books")
    assert books.status == 200
    assert books.headers["RateLimit"].endswith('"requests";r=59;t=3600')
    assert (await client.post("/v2/library/mcp", json=SPEC_CALL)).status == 200
    assert (await client.get("/api/books")).status == 404
    doc = await (await client.get("/v2/library/openapi.json")).json()
    assert "/v2/library/books/{book_id}" in doc["paths"]
    assert "/iiif/3/{identifier}/info.json" in doc["paths"]
