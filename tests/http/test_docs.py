"""The generated documents: /api/openapi.json and /llms.txt list exactly what exists, and the API honours its schema."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
import schemathesis
from aiohttp import web
from aiohttp.test_utils import TestClient
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from imagesvc import tools
from imagesvc.app import build_app
from imagesvc.catalog import Catalog
from imagesvc.catalog.api_keys import create_key
from imagesvc.web.docs import openapi_path
from imagesvc.web.routes import mounted
from tests.library import settings_for


async def test_openapi_lists_exactly_the_route_table(client: TestClient) -> None:
    resp = await client.get("/api/openapi.json")
    doc = await resp.json()
    assert resp.status == 200
    assert doc["openapi"].startswith("3.1")
    documented = {(method.upper(), path) for path, ops in doc["paths"].items() for method in ops}
    assert documented == {(method, openapi_path(path)) for method, path, _ in mounted("/api")}
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert op["summary"], (method, path)
            assert op["responses"]["default"]["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/Error"
            }
            declared = {p["name"] for p in op["parameters"] if p["in"] == "path"}
            assert declared == set(re.findall(r"\{(\w+)\}", path)), path


async def test_openapi_parameters_come_from_the_tool_schemas(client: TestClient) -> None:
    doc = await (await client.get("/api/openapi.json")).json()
    quote = doc["paths"]["/api/books/{book_id}/quote"]["get"]
    assert quote["x-tool"] == "get_quote"
    params = {p["name"]: p for p in quote["parameters"]}
    assert params["page"]["required"] is True
    assert params["page"]["schema"]["type"] == "integer"
    assert params["book_id"]["in"] == "path"
    assert {op["x-tool"] for ops in doc["paths"].values() for op in ops.values() if "x-tool" in op} <= set(
        tools.load_all()
    )


async def test_llms_txt_names_every_route_and_tool_with_an_example(client: TestClient) -> None:
    resp = await client.get("/llms.txt")
    text = await resp.text()
    assert resp.status == 200
    assert resp.content_type == "text/plain"
    for method, path, _ in mounted("/api"):
        assert f"- {method} {openapi_path(path)}: " in text, path
    for name in tools.load_all():
        section = text.split(f"### {name}\n", 1)[1].split("### ", 1)[0]
        assert f'"name": "{name}"' in section  # its example call
    for code in ("not_found", "rate_limited", "invalid_request", "-32602", "Authorization: Bearer"):
        assert code in text


async def test_every_door_lists_the_same_tools(client: TestClient) -> None:
    registry = set(tools.load_all())
    listed = await client.post("/api/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    mcp_names = {t["name"] for t in (await listed.json())["result"]["tools"]}
    llms = set(re.findall(r"^### (\w+)$", await (await client.get("/llms.txt")).text(), re.M))
    assert registry == mcp_names == llms


@pytest.fixture
def live_url(data_dir: Path) -> Iterator[str]:
    """The app on a loopback port, run by its own event loop in a thread (schemathesis calls it synchronously)."""
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(build_app(settings_for(data_dir)))

    async def start() -> str:
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    url = loop.run_until_complete(start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield url
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    loop.close()


def test_schemathesis_finds_no_server_error_and_no_schema_mismatch(live_url: str, data_dir: Path) -> None:
    """Generated requests to every operation: no 5xx, every status, content type and body as documented."""
    catalog = Catalog(data_dir / "catalog.sqlite3")
    try:
        key, _ = create_key(catalog, "enterprise", "schemathesis")  # a high request limit: fuzzing, not throttling
    finally:
        catalog.close()
    schema = schemathesis.openapi.from_url(f"{live_url}/api/openapi.json")
    # what the API promises: no 5xx, and every answer's status, content type and body as documented
    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]

    @given(case=schema.as_strategy())
    @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def check(case: schemathesis.Case) -> None:
        headers = {"Authorization": f"Bearer {key}"}
        case.call_and_validate(base_url=live_url, headers=headers, checks=checks, timeout=10)

    check()


async def test_documents_give_each_route_the_parameters_it_accepts_with_its_aliases(client: TestClient) -> None:
    """OpenAPI and llms.txt list the names a route parses, from the same declaration; aliases are written out."""
    doc = await (await client.get("/api/openapi.json")).json()
    gallery = {p["name"]: p for p in doc["paths"]["/api/gallery"]["get"]["parameters"]}
    assert {"query", "type", "subject", "figure", "symbol", "year_from", "year_to", "book_id", "limit"} <= set(gallery)
    assert gallery["maxPerBook"]["schema"]["default"] == 3
    assert "Also accepted as q." in gallery["query"]["schema"]["description"]
    assert not {"q", "book", "max_per_book"} & set(gallery)  # aliases are not parameters of their own
    usage = {p["name"] for p in doc["paths"]["/api/dataset/v1/usage"]["get"]["parameters"]}
    assert usage == {"days"}
    assert doc["paths"]["/api/rate_limit"]["get"]["parameters"] == []
    image = {p["name"] for p in doc["paths"]["/api/image"]["get"]["parameters"]}
    assert image == {"book_id", "page", "illustration", "tier", "clean"}
    for name in gallery:  # what OpenAPI documents, the route accepts
        body = await (await client.get("/api/gallery", params={name: "1"})).json()
        assert "accepted" not in body, (name, body)  # never refused as unknown
    text = await (await client.get("/llms.txt")).text()
    assert "- query (string, also accepted as q)" in text
    assert "Any other parameter is a 400 naming it." in text


async def test_the_upload_page_refuses_a_document_with_a_page_its_description_promises(client: TestClient) -> None:
    """A PDF sent to the search-by-image form is refused as a page for people (HTML 422), and OpenAPI says that
    page's refusals are HTML (schemathesis found the 422 documented only as the JSON error shape)."""
    form = aiohttp.FormData()
    form.add_field("image", b"%PDF-1.4\n1 0 obj\n<</Type/Catalog>>\nendobj\n%%EOF\n", filename="scan.pdf")
    resp = await client.post("/search-by-image", data=form)
    assert resp.status == 422
    assert resp.content_type == "text/html"
    assert "not" in (await resp.text()).lower()
    doc = await (await client.get("/api/openapi.json")).json()
    responses = doc["paths"]["/search-by-image"]["post"]["responses"]
    for status in ("408", "413", "415", "422", "503"):
        assert "text/html" in responses[status]["content"], status
