"""The command-line tool client: ``imagesvc tools`` and ``imagesvc <tool> --arg value``, over a server's MCP endpoint.

Arguments and help come from the schemas the server lists in ``tools/list``, so the client offers exactly the tools
of the server it talks to, under the same names (aliases included). Exit status: 0 on success, 1 when the call
failed (message on stderr), 2 for bad usage; under ``--json`` a failure also prints the JSON error shape on stdout.

The server is ``--url``, else ``IMAGESVC_URL``, else the local server as this environment configures it
(``IMAGESVC_HOST``, ``IMAGESVC_PORT``, ``IMAGESVC_BASE_PATH``). ``IMAGESVC_URL`` and ``IMAGESVC_KEY`` are the
client's own variables (``settings.CLIENT_VARIABLES``), not server settings.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

import aiohttp

__all__ = ["ClientError", "UsageError", "build_tool_parser", "default_url", "main", "render", "rpc"]

ALIASES = "x-aliases"  # a schema property's other accepted names (imagesvc.surface.arguments)
_ids = itertools.count(1)


class ClientError(Exception):
    """A failure to report: an error code (the server's, or ``unavailable`` when it cannot be reached), a message,
    recovery hints, and the exit status."""

    exit_status = 1

    def __init__(
        self, message: str, hints: Sequence[str] = (), code: str = "unavailable", body: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.hints = list(hints)
        self.code = code
        self.body = body

    def to_dict(self) -> dict[str, Any]:
        """The JSON error shape every door uses, ``{error, message, recovery, ...}``: the server's, when it sent one."""
        own = {"error": self.code, "message": str(self), "recovery": self.hints}
        return self.body if self.body is not None else own


class UsageError(ClientError):
    """A command line the client cannot run (unknown option, missing argument): exit status 2."""

    exit_status = 2

    def __init__(self, message: str, hints: Sequence[str] = ()) -> None:
        super().__init__(message, hints, code="invalid_request")


class _Parser(argparse.ArgumentParser):
    """argparse that raises ``UsageError`` instead of exiting, so ``--json`` can report it as JSON."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}", [f"See '{self.prog} --help'."])


def default_url(environ: Mapping[str, str]) -> str:
    """``IMAGESVC_URL``, else the MCP endpoint of the server this environment configures (host, port, base path)."""
    if environ.get("IMAGESVC_URL"):
        return environ["IMAGESVC_URL"]
    from imagesvc.settings import SettingsError, load_settings

    try:
        settings = load_settings(environ)
    except SettingsError as exc:
        raise UsageError(f"cannot work out the server's URL: {exc}", ["Pass --url or set IMAGESVC_URL."]) from None
    host = settings.host if settings.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{settings.port}{settings.base_path}/mcp"


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
        raise ClientError(str(body.get("message", "")), body.get("recovery", []), code=str(body["error"]), body=body)
    if not isinstance(body, dict) or "jsonrpc" not in body:
        raise ClientError(f"{url} answered HTTP {resp.status} without a JSON-RPC response.")
    if "error" in body:
        error = body["error"]
        raise ClientError(f"{error.get('message', 'error')} (JSON-RPC {error.get('code')})", code="invalid_request")
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
    parser = _Parser(prog=f"imagesvc {spec['name']}", description=spec.get("description"))
    parser.add_argument("--json", action="store_true", help="print the raw JSON result")
    schema = spec.get("inputSchema", {})
    required = set(schema.get("required", ()))
    for name, prop in schema.get("properties", {}).items():
        names = [name, *prop.get(ALIASES, [])]
        flags = list(dict.fromkeys(flag for n in names for flag in (f"--{n}", f"--{n.replace('_', '-')}")))
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
                raise UsageError(f"--{name}: {exc}") from None
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
        raise UsageError(f"the server has no tool {argv[0]!r}", [f"Tools: {', '.join(sorted(specs))}."])
    spec = specs[argv[0]]
    values = vars(build_tool_parser(spec).parse_args(argv[1:]))
    as_json = as_json or bool(values.get("json"))
    result = await rpc(url, key, "tools/call", {"name": spec["name"], "arguments": _arguments(spec, values)})
    body = result.get("structuredContent")
    if body is None:
        body = next((json.loads(c["text"]) for c in result.get("content", []) if c.get("type") == "text"), {})
    if result.get("isError"):
        code = str(body.get("error", "error"))
        raise ClientError(str(body.get("message", "")), body.get("recovery", []), code=code, body=body)
    print(json.dumps(body, indent=2, ensure_ascii=False) if as_json else "\n".join(render(body)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``imagesvc [--url URL] [--key KEY] [--json] (tools | <tool> [--arg value ...])``."""
    args = list(sys.argv[1:] if argv is None else argv)
    front = _Parser(prog="imagesvc", add_help=False, allow_abbrev=False)
    front.add_argument("--url", help="the server's /mcp URL (or IMAGESVC_URL; default: the local server)")
    front.add_argument("--key", default=os.environ.get("IMAGESVC_KEY"), help="API key (or IMAGESVC_KEY)")
    front.add_argument("--json", action="store_true", help="print raw JSON")
    as_json = "--json" in args
    try:
        options, rest = front.parse_known_args(args)
        if not rest:
            raise UsageError("say which tool to call, or 'tools' to list them", [front.format_usage().strip()])
        url = options.url or default_url(os.environ)
        return asyncio.run(_run(rest, url, options.key, options.json))
    except ClientError as exc:
        if as_json:  # scripts read stdout: the error shape, whole
            print(json.dumps(exc.to_dict(), indent=2, ensure_ascii=False))
        print(f"imagesvc: {exc.code}: {exc}" if exc.code != "invalid_request" else f"imagesvc: {exc}", file=sys.stderr)
        for hint in exc.hints:
            print(f"  hint: {hint}", file=sys.stderr)
        return exc.exit_status
