"""The command-line tool client: ``imagesvc tools`` and ``imagesvc <tool> --arg value``, over a server's MCP endpoint.

Arguments and help come from the schemas the server lists in ``tools/list``, so the client offers exactly the tools
of the server it talks to. Exit status: 0 on success, 1 when the call failed (message on stderr), 2 for bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp

__all__ = ["DEFAULT_URL", "ClientError", "build_tool_parser", "main", "render", "rpc"]

DEFAULT_URL = "http://127.0.0.1:8080/api/mcp"
_ids = itertools.count(1)


class ClientError(Exception):
    """A failure to report on stderr: the server's error code and message, with recovery hints."""

    def __init__(self, message: str, hints: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.hints = list(hints)


async def rpc(url: str, key: str | None, method: str, params: dict[str, Any] | None = None) -> Any:
    """One JSON-RPC request; its ``result``, or ``ClientError`` for transport, HTTP and protocol failures."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    message = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params or {}}
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http,
            http.post(url, json=message, headers=headers) as resp,
        ):
            body = await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError) as exc:
        hints = ["Start the server with 'imagesvc serve' or pass --url."]
        raise ClientError(f"cannot reach {url}: {exc}", hints) from None
    except ValueError:
        raise ClientError(f"{url} did not answer with JSON; is it an imagesvc /mcp endpoint?") from None
    if isinstance(body, dict) and "error" in body and "jsonrpc" not in body:  # an HTTP error (e.g. 429)
        raise ClientError(f"{body['error']}: {body.get('message', '')}", body.get("recovery", []))
    if not isinstance(body, dict) or "jsonrpc" not in body:
        raise ClientError(f"{url} answered HTTP {resp.status} without a JSON-RPC response.")
    if "error" in body:
        raise ClientError(f"{body['error'].get('message', 'error')} (JSON-RPC {body['error'].get('code')})")
    return body["result"]


def _converter(prop: dict[str, Any]) -> Callable[[str], Any]:
    kind = prop.get("type")
    if kind == "integer":
        return int
    if kind == "number":
        return float
    return str


def build_tool_parser(spec: dict[str, Any]) -> argparse.ArgumentParser:
    """An argument parser for one tool from its ``inputSchema``: ``--name value`` per property.

    Booleans are ``--flag``/``--no-flag``; arrays repeat (``--pages 1 --pages 2``) or take a comma list (``1,2``).
    """
    parser = argparse.ArgumentParser(prog=f"imagesvc {spec['name']}", description=spec.get("description"))
    parser.add_argument("--json", action="store_true", help="print the raw JSON result")
    schema = spec.get("inputSchema", {})
    required = set(schema.get("required", ()))
    for name, prop in schema.get("properties", {}).items():
        flags = list(dict.fromkeys([f"--{name}", f"--{name.replace('_', '-')}"]))
        text = prop.get("description", "")
        if "default" in prop:
            text += f" (default: {json.dumps(prop['default'])})"
        options: dict[str, Any] = {"dest": name, "help": text.strip() or None, "default": argparse.SUPPRESS}
        if prop.get("type") == "boolean":
            parser.add_argument(*flags, action=argparse.BooleanOptionalAction, **options)
            continue
        if prop.get("type") == "array":
            options.update(action="append", metavar="VALUE[,VALUE...]")
        elif "enum" in prop:
            options["choices"] = prop["enum"]
        else:
            options["type"] = _converter(prop)
        parser.add_argument(*flags, required=name in required, **options)
    return parser


def _arguments(spec: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    props = spec.get("inputSchema", {}).get("properties", {})
    out: dict[str, Any] = {}
    for name, value in values.items():
        if name == "json":
            continue
        prop = props.get(name, {})
        if prop.get("type") == "array":
            convert = _converter(prop.get("items", {}))
            try:
                value = [convert(part) for item in value for part in item.split(",") if part.strip()]
            except ValueError as exc:
                raise ClientError(f"--{name}: {exc}") from None
        out[name] = value
    return out


def render(value: Any, indent: int = 0) -> list[str]:
    """A result as indented ``key: value`` lines, lists as ``-`` items: readable without a JSON viewer."""
    pad = "  " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, dict | list) and item:
                lines += [f"{pad}{key}:", *render(item, indent + 1)]
            else:
                lines.append(f"{pad}{key}: {json.dumps(item, ensure_ascii=False) if item in ({}, []) else item}")
    elif isinstance(value, list):
        for item in value:
            sub = render(item, indent + 1)
            lines.append(f"{pad}- {sub[0].strip()}" if sub else f"{pad}-")
            lines += sub[1:]
    else:
        lines.append(f"{pad}{value}")
    return lines


async def _run(argv: list[str], url: str, key: str | None, as_json: bool) -> int:
    listed = (await rpc(url, key, "tools/list"))["tools"]
    if argv[0] == "tools":
        if as_json:
            print(json.dumps(listed, indent=2, ensure_ascii=False))
        for spec in [] if as_json else listed:
            print(f"{spec['name']:<18} {spec.get('description', '')}")
        return 0
    specs = {spec["name"]: spec for spec in listed}
    if argv[0] not in specs:
        raise ClientError(f"the server has no tool {argv[0]!r}", [f"Tools: {', '.join(sorted(specs))}."])
    spec = specs[argv[0]]
    values = vars(build_tool_parser(spec).parse_args(argv[1:]))
    as_json = as_json or bool(values.get("json"))
    result = await rpc(url, key, "tools/call", {"name": spec["name"], "arguments": _arguments(spec, values)})
    body = result.get("structuredContent")
    if body is None:
        body = next((json.loads(c["text"]) for c in result.get("content", []) if c.get("type") == "text"), {})
    if result.get("isError"):
        raise ClientError(f"{body.get('error', 'error')}: {body.get('message', '')}", body.get("recovery", []))
    print(json.dumps(body, indent=2, ensure_ascii=False) if as_json else "\n".join(render(body)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``imagesvc [--url URL] [--key KEY] [--json] (tools | <tool> [--arg value ...])``."""
    front = argparse.ArgumentParser(prog="imagesvc", add_help=False, allow_abbrev=False)
    front.add_argument("--url", default=os.environ.get("IMAGESVC_URL", DEFAULT_URL), help="the server's /mcp URL")
    front.add_argument("--key", default=os.environ.get("IMAGESVC_KEY"), help="API key (or IMAGESVC_KEY)")
    front.add_argument("--json", action="store_true", help="print raw JSON")
    options, rest = front.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    if not rest:
        front.print_usage(sys.stderr)
        return 2
    try:
        return asyncio.run(_run(rest, options.url, options.key, options.json))
    except ClientError as exc:
        print(f"imagesvc: {exc}", file=sys.stderr)
        for hint in exc.hints:
            print(f"  hint: {hint}", file=sys.stderr)
        return 1
