"""Generated hostile input against a live server: any JSON POSTed to /api/mcp, any malformed key.

The server runs on its own event loop in a thread, so that hypothesis drives it with plain blocking HTTP.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import math
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagesvc import tools
from imagesvc.app import build_app
from imagesvc.catalog import Catalog
from imagesvc.catalog.api_keys import create_key
from tests.library import settings_for

FEW = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


@pytest.fixture
def live(data_dir: Path) -> Iterator[tuple[int, str]]:
    """(port, enterprise key) of the real app served from a thread; the key's limit outlasts the examples."""
    catalog = Catalog(data_dir / "catalog.sqlite3")
    try:
        key = create_key(catalog, "enterprise", "property test")[0]
    finally:
        catalog.close()
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(build_app(settings_for(data_dir)))
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield port, key
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()


def request(port: int, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, str, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type") or "", resp.read().decode()
    finally:
        conn.close()


def strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


CONTROLS = "".join(map(chr, range(0x7F, 0xA0)))  # the HTTP parser refuses these itself: a JSON 400 (test_hostile_input)
LEAVES = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12)
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
NAMES = st.sampled_from(sorted(tools.load_all())) | st.text(max_size=8)
ARGUMENTS = st.dictionaries(st.sampled_from(["book_id", "page", "limit", "query", "id", "pages", "x"]), VALUES)
MESSAGES = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.just("2.0") | VALUES,
        "id": st.integers() | st.text(max_size=5) | st.sampled_from([math.nan, math.inf, 1.5]) | st.floats() | VALUES,
        "method": st.sampled_from(["initialize", "ping", "tools/list", "tools/call", "notifications/x"]) | VALUES,
        "params": st.fixed_dictionaries({}, optional={"name": NAMES, "arguments": ARGUMENTS}) | VALUES,
    },
)
BODIES = MESSAGES | st.lists(MESSAGES | VALUES, max_size=4) | VALUES


def is_response(reply: Any) -> bool:
    if not isinstance(reply, dict) or reply.get("jsonrpc") != "2.0" or "id" not in reply:
        return False
    if "error" in reply:
        error = reply["error"]
        return "result" not in reply and isinstance(error.get("code"), int) and isinstance(error.get("message"), str)
    return isinstance(reply.get("result"), dict)


@FEW
@given(body=BODIES)
def test_any_json_to_mcp_gets_a_json_rpc_answer_never_a_500(live: tuple[int, str], body: Any) -> None:
    port, key = live
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    status, ctype, text = request(port, "POST", "/api/mcp", json.dumps(body).encode(), headers)
    assert status in (200, 202, 400), (status, text[:300])
    if status == 202:
        assert text == ""
        return
    assert ctype.startswith("application/json")
    reply = strict(text)
    replies = reply if isinstance(reply, list) else [reply]
    assert replies and all(is_response(r) for r in replies), text[:500]
    for r in replies:
        content = r.get("result", {}).get("structuredContent") or {}
        assert content.get("error") != "internal", text[:500]
        assert r.get("error", {}).get("code") != -32603, text[:500]


@FEW
@given(tail=st.text(st.characters(min_codepoint=0x21, max_codepoint=0xFF, exclude_characters=CONTROLS), max_size=60))
def test_malformed_keys_are_401_never_500(live: tuple[int, str], tail: str) -> None:
    port, key = live
    for credential in (f"isk_{tail}", key[:-1] + tail[:1] if tail else key[:-1], f"{key}{tail}"):
        if credential == key:
            continue
        auth = {"Authorization": f"Bearer {credential}"}
        status, _, text = request(port, "GET", "/api/books?limit=1", None, auth)
        assert status == 401, (credential, status, text[:200])
        assert strict(text)["error"] == "unauthorized"
