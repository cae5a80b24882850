"""The command-line tool client against a live server: tools, arguments from schemas, readable and JSON output."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer

from imagesvc import tools
from imagesvc.app import build_app
from tests.library import copy_library, settings_for

BOOK = "demo-speculum-fornacum"


@pytest.fixture
async def mcp_url(demo_library: dict, tmp_path: Path) -> AsyncIterator[str]:
    data = copy_library(demo_library["data"], tmp_path / "data")
    # search_wait: two searches compared must both be ranked in full, never one before the text model is ready.
    server = TestServer(build_app(settings_for(data, search_wait=600)), host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("/api/mcp"))
    await server.close()


async def cli(*args: str, **variables: str) -> tuple[int, str, str]:
    """Run ``imagesvc ARGS`` in a subprocess while this loop keeps serving; (exit status, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGESVC_")} | {"IMAGESVC_KEY": ""} | variables
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "imagesvc.cli", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_tools_lists_every_tool_of_the_server(mcp_url: str) -> None:
    code, out, _ = await cli("--url", mcp_url, "tools")
    assert code == 0
    assert {line.split()[0] for line in out.splitlines() if line.strip()} == set(tools.load_all())


async def test_a_tool_call_with_json_and_readable_output(mcp_url: str) -> None:
    code, out, _ = await cli("get_quote", "--book-id", BOOK, "--page", "2", "--no-include-original", "--json",
                             "--url", mcp_url)  # fmt: skip
    assert code == 0
    body = json.loads(out)
    assert body["citation"]["citation_url"].endswith(f"/book/{BOOK}?page=2")
    code, out, _ = await cli("--url", mcp_url, "get_book", "--book_id", BOOK)
    assert code == 0
    assert f"slug: {BOOK}" in out and "pages:" in out


async def test_array_arguments_take_comma_lists(mcp_url: str) -> None:
    code, out, _ = await cli("--url", mcp_url, "--json", "get_quotes", "--book-id", BOOK, "--pages", "1,2")
    assert code == 0, out
    assert json.loads(out)["pages_served"] == 2


async def test_failures_exit_non_zero_with_the_message(mcp_url: str) -> None:
    code, out, err = await cli("--url", mcp_url, "get_book", "--book-id", "no-such-book")
    assert (code, out) == (1, "")
    assert "not_found" in err and "no-such-book" in err and "hint:" in err
    code, _, err = await cli("--url", mcp_url, "get_quote", "--book-id", BOOK)  # --page is required
    assert code == 2 and "--page" in err
    code, _, err = await cli("--url", "http://127.0.0.1:9/mcp", "tools")
    assert code == 1 and "cannot reach" in err


async def test_help_comes_from_the_tool_schema(mcp_url: str) -> None:
    code, out, _ = await cli("--url", mcp_url, "get_book_text", "--help")
    assert code == 0
    assert "--book-id" in out and "--content" in out and "{ocr,translation,both}" in out


async def test_without_url_the_client_finds_the_server_this_environment_configures(mcp_url: str) -> None:
    """No --url and no IMAGESVC_URL: the local server on IMAGESVC_PORT under IMAGESVC_BASE_PATH, as `serve` would."""
    port = mcp_url.split(":")[2].split("/")[0]
    code, out, err = await cli("tools", IMAGESVC_PORT=port)
    assert code == 0, err
    assert "get_book" in out
    code, _, err = await cli("tools", IMAGESVC_PORT=port, IMAGESVC_BASE_PATH="/elsewhere")
    assert code == 1 and "not_found" in err and "/elsewhere/mcp" in err  # it asked that server, at that path


async def test_imagesvc_url_is_the_client_s_own_variable(mcp_url: str) -> None:
    code, out, err = await cli("tools", IMAGESVC_URL=mcp_url)
    assert code == 0 and "get_book" in out, err
    code, out, err = await cli("settings", IMAGESVC_URL=mcp_url, IMAGESVC_KEY="k")  # not an unknown server setting
    assert code == 0, err
    assert "IMAGESVC_PORT=8080" in out


async def test_failures_under_json_print_the_error_shape_on_stdout(mcp_url: str) -> None:
    code, out, _ = await cli("--url", mcp_url, "--json", "get_book", "--book-id", "no-such-book")
    body = json.loads(out)
    assert code == 1 and body["error"] == "not_found" and body["recovery"] and "no-such-book" in body["message"]
    code, out, _ = await cli("--url", mcp_url, "get_quote", "--book-id", BOOK, "--json")  # --page is required
    assert code == 2 and json.loads(out)["error"] == "invalid_request" and "--page" in json.loads(out)["message"]
    code, out, _ = await cli("--url", "http://127.0.0.1:9/mcp", "--json", "tools")
    assert code == 1 and json.loads(out)["error"] == "unavailable"


async def test_aliases_in_the_schema_are_flags_too(mcp_url: str) -> None:
    args = ("--url", mcp_url, "--json", "search_images", "--book-id", BOOK)
    code, canonical, err = await cli(*args, "--query", "plant", "--maxPerBook", "1000")
    assert code == 0, err
    code, aliased, err = await cli(*args, "--q", "plant", "--max-per-book", "1000")
    assert code == 0, err
    assert json.loads(aliased) == json.loads(canonical)
