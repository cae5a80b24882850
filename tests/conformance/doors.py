"""The four doors of one live server, called the way the spec shows: REST, raw JSON-RPC, the official MCP client, and
the command line (``imagesvc <tool> --json``). Each returns what a caller would read, so tests compare doors."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

__all__ = ["Answer", "Doors"]


@dataclass
class Answer:
    """One door's answer: ``ok`` (HTTP 2xx or no ``isError``), the JSON body (the error shape when not ok)."""

    ok: bool
    body: Any
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def error(self) -> tuple[str, Any]:
        """What an error answer must share across doors: its code and the parameter it names (if any)."""
        return self.body["error"], self.body.get("parameter")


class Doors:
    """Calls into one server at ``origin`` (REST under ``/api``), all with the same key."""

    def __init__(self, origin: str, key: str) -> None:
        self.origin, self.key = origin.rstrip("/"), key
        self.mcp_url = f"{self.origin}/api/mcp"
        self._ids = 0

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    async def rest(self, path: str, params: Any = None, method: str = "GET") -> Answer:
        """``GET {base_url}{path}`` with query parameters as given (a dict, or a list of pairs to repeat one)."""
        async with (
            aiohttp.ClientSession() as http,
            http.request(method, f"{self.origin}{path}", params=params, headers=self._auth()) as resp,
        ):
            raw, ctype = await resp.read(), resp.content_type
            if ctype.endswith("json") and raw:
                body: Any = json.loads(raw)
            else:
                body = raw.decode() if ctype.startswith("text/") else raw
            return Answer(resp.status < 400, body, resp.status, dict(resp.headers))

    async def rpc(self, tool: str, arguments: dict[str, Any]) -> Answer:
        """A plain JSON-RPC ``tools/call`` POST with only Content-Type (and the optional Authorization) set."""
        self._ids += 1
        message = {"jsonrpc": "2.0", "id": self._ids, "method": "tools/call"}
        message["params"] = {"name": tool, "arguments": arguments}
        headers = {"Content-Type": "application/json", **self._auth()}
        async with (
            aiohttp.ClientSession(skip_auto_headers=("Accept", "User-Agent")) as http,
            http.post(self.mcp_url, data=json.dumps(message), headers=headers) as resp,
        ):
            reply = await resp.json()
        assert resp.status == 200 and reply["id"] == self._ids, reply
        result = reply["result"]
        assert json.loads(result["content"][0]["text"]) == result["structuredContent"]  # text and structure agree
        return Answer(not result["isError"], result["structuredContent"])

    async def client(self, tool: str, arguments: dict[str, Any]) -> Answer:
        """The official ``mcp`` client's ``call_tool``, in a session of its own (opened and closed in this task)."""
        async with (
            httpx2.AsyncClient(headers=self._auth()) as http,
            streamable_http_client(self.mcp_url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            result = await session.call_tool(tool, arguments)
        return Answer(not result.is_error, result.structured_content)

    async def cli(self, tool: str, arguments: dict[str, Any]) -> Answer:
        """``imagesvc <tool> --json --<name> <value>...`` in a subprocess: stdout is the JSON result or error."""
        argv = ["--url", self.mcp_url, "--key", self.key, tool, "--json"]
        for name, value in arguments.items():
            if isinstance(value, bool):
                argv.append(f"--{name}" if value else f"--no-{name}")
            elif isinstance(value, list):
                argv += [f"--{name}", ",".join(map(str, value))]
            else:
                argv += [f"--{name}", str(value)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGESVC_")}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "imagesvc.cli", *argv, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
        assert out, f"imagesvc {tool} printed nothing on stdout (exit {proc.returncode}): {err.decode()}"
        body = json.loads(out)
        assert (proc.returncode == 0) == ("error" not in body), (proc.returncode, body)
        return Answer(proc.returncode == 0, body)

    async def every_mcp_door(self, tool: str, arguments: dict[str, Any], *, cli: bool = True) -> list[Answer]:
        """The same call through raw JSON-RPC, the official client and (unless ``cli`` is False) the CLI."""
        answers = [await self.rpc(tool, arguments), await self.client(tool, arguments)]
        if cli:
            answers.append(await self.cli(tool, arguments))
        return answers
