"""``/llms.txt``: the whole API as plain text for language models, generated from the routes, tools and policies."""

from __future__ import annotations

import json
from typing import Any

from imagesvc import errors, tools
from imagesvc.access.policy import CLASSES
from imagesvc.surface.arguments import ALIASES
from imagesvc.web.docs import openapi_path, route_doc, route_parameters, route_tool
from imagesvc.web.params import ANY, body_schema, query_schema

__all__ = ["example_arguments", "llms_document", "schema_type"]


def schema_type(prop: dict[str, Any]) -> str:
    """A short type name for a JSON schema property: ``integer``, ``one of json|plain``, ``array of integer``."""
    if "enum" in prop:
        return "one of " + "|".join(map(str, prop["enum"]))
    kind = prop.get("type", "any")
    if kind == "array":
        return f"array of {schema_type(prop.get('items', {}))}"
    return "|".join(kind) if isinstance(kind, list) else str(kind)


def _example_value(name: str, prop: dict[str, Any]) -> Any:
    if "examples" in prop:
        return prop["examples"][0]
    if "enum" in prop:
        return prop["enum"][0]
    kind = prop.get("type")
    if kind == "integer":
        return prop.get("minimum", 1) or 1
    if kind == "number":
        return prop.get("minimum", 1)
    if kind == "boolean":
        return True
    if kind == "array":
        return [_example_value(name, prop.get("items", {}))]
    return {"book_id": "demo-speculum-fornacum", "query": "alembic"}.get(name, f"<{name}>")


def example_arguments(spec: tools.Tool) -> dict[str, Any]:
    """Arguments for an example call: every required argument, filled from the schema."""
    props = spec.input_schema.get("properties", {})
    return {name: _example_value(name, props.get(name, {})) for name in spec.input_schema.get("required", [])}


def _tool_section(spec: tools.Tool) -> list[str]:
    lines = [f"### {spec.name}", "", spec.description, ""]
    required = set(spec.input_schema.get("required", ()))
    props = spec.input_schema.get("properties", {})
    if props:
        lines.append("Arguments:")
    for name, prop in props.items():
        notes = ["required"] if name in required else []
        if "default" in prop:
            notes.append(f"default {json.dumps(prop['default'])}")
        for bound in ("minimum", "maximum", "maxItems"):
            if bound in prop:
                notes.append(f"{bound} {prop[bound]}")
        if prop.get(ALIASES):
            notes.append("also accepted as " + ", ".join(prop[ALIASES]))
        text = f"- {name} ({schema_type(prop)}{', ' + ', '.join(notes) if notes else ''})"
        lines.append(text + (f": {prop['description']}" if prop.get("description") else ""))
    if not props:
        lines.append("Arguments: none.")
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": spec.name, "arguments": example_arguments(spec)},
    }
    lines += ["", "Example (POST /mcp):", json.dumps(call), ""]
    return lines


def _route_section(routes: Any, base_path: str) -> list[str]:
    lines: list[str] = []
    for route in routes:
        method, path = route.method, route.path
        doc = route_doc(method, path, route.handler)
        lines.append(f"- {method} {openapi_path(route.full_path(base_path))}: {doc.summary}")
        tool = route_tool(route.handler)
        if tool:
            lines.append(f"  Same as the {tool} tool.")
        params = [p for p in route_parameters(openapi_path(path), route.handler) if p["in"] == "query"]
        if params:
            described = ", ".join(f"{p['name']} ({schema_type(p['schema'])})" for p in params)
            lines.append(f"  Query parameters: {described}. Any other parameter is a 400 naming it.")
        elif route.handler is not None and query_schema(route.handler) is not ANY:
            lines.append("  No query parameters; any is a 400 naming it.")
        body = body_schema(route.handler)
        for media, schema in (body or {}).items():
            lines.append(f"  Body {media}: {_body_fields(schema)}")
        if doc.media != "application/json":
            lines.append(f"  Responds with {doc.media}.")
    return lines


def _body_fields(schema: dict[str, Any]) -> str:
    """One declared body as a line: its fields and their types, or what it is."""
    props = schema.get("properties")
    if not props:
        return schema.get("description", schema_type(schema))
    required = set(schema.get("required", ()))
    fields = [f"{n} ({schema_type(p)}{', required' if n in required else ''})" for n, p in props.items()]
    return ", ".join(fields) + "."


def _errors_section() -> list[str]:
    seen: dict[str, int] = {}
    pending = [errors.ImagesvcError]
    while pending:
        cls = pending.pop()
        seen.setdefault(cls.code, cls.status)
        pending.extend(cls.__subclasses__())
    lines = [f"- {code}: HTTP {status}" for code, status in sorted(seen.items(), key=lambda item: item[1])]
    return lines


def llms_document(routes: Any, origin: str, base_path: str = "") -> str:
    """The complete plain-text documentation for a service at ``origin`` with its REST API under ``base_path``."""
    base_url = origin + base_path
    registry = tools.load_all()
    classes = [f"- {c.describe()}." for c in sorted(CLASSES.values(), key=lambda c: c.rank)]
    lines = [
        "# imagesvc",
        "",
        "> Images, texts and quotes of a digital library of rare pre-modern books: book metadata with page images,",
        "> page text and quotations with citations, illustrations. The same tools are offered three ways: an MCP",
        "> server (JSON-RPC 2.0 over HTTP), a REST API, and the `imagesvc` command line client.",
        "",
        f"Base URL: {base_url} (the REST routes and /mcp below are relative to it). Site root: {origin} (this file,",
        "IIIF under /iiif/3/, public image tiers under /img/, /health and /metrics).",
        "",
        "## Authentication",
        "",
        "No key is needed. An optional API key, sent as 'Authorization: Bearer <key>', raises limits and attributes",
        "traffic; /dataset/v1/usage requires one, and only full-tier keys may ask /image for clean=1 copies.",
        "",
        "## Limits",
        "",
        "Budgets roll over 24 hours: a text pool (pages of text and quotes) and an images pool.",
        *classes,
        "Every counted response carries RateLimit-Policy and RateLimit headers; an exhausted limit answers 429 with",
        "Retry-After (seconds). GET /rate_limit shows your figures without counting anything.",
        "Prices are exact: 1 unit a page of text, 1 unit an /image, and an IIIF output its area's share of a",
        "2000 x 2000 image in thousandths (a 512 px tile 0.066); figures you read are whole units (remaining rounded",
        "down). Free, never counted: the public marked tiers under /img/ (and the thumbnails MCP results embed),",
        "and what delivers no page text or pixels (metadata, IIIF info.json and manifests). Every other output is",
        "counted when its whole body was handed to the connection; while budgets cannot be checked, nothing",
        "counted is delivered (503 unavailable).",
        "",
        "## Errors",
        "",
        "REST errors are JSON with the HTTP status: {error, message, recovery, request_id, ...}. Branch on 'error':",
        *_errors_section(),
        "Over MCP a failed tool call is a result with isError: true and structuredContent {error, message,",
        "recovery, retry_after?}; protocol faults are JSON-RPC errors: -32700 parse error, -32600 invalid request,",
        "-32601 unknown method, -32602 invalid params (an unknown tool name included).",
        "",
        "## MCP endpoint",
        "",
        f"POST {base_url}/mcp with Content-Type: application/json. Stateless: answers are plain JSON, no session id,",
        "no event stream (GET answers 405; DELETE answers 204, as there is no session to end). Methods: initialize",
        "(protocol versions 2025-11-25, 2025-06-18, 2025-03-26), ping, tools/list, tools/call; a JSON array is a",
        "batch: at most 50 messages in a body of at most 256 KiB, each tools/call counted as one request against",
        "your request limit, answers up to 4 MiB a POST (later calls get an error result: send them again in another",
        "POST). Ids are strings, integers or null. With include_images: true, image results add up to 4 thumbnails",
        "as image content. Example:",
        f"curl -s {base_url}/mcp -H 'Content-Type: application/json' "
        """-d '{"jsonrpc":"2.0","id":1,"method":"tools/list"}'""",
        "",
        "## Tools",
        "",
    ]
    for name in sorted(registry):
        lines += _tool_section(registry[name])
    lines += ["## Routes", "", f"Paths as served from the site root. OpenAPI 3.1: {base_url}/openapi.json.", ""]
    lines += _route_section(routes, base_path)
    lines += [
        "",
        "## Command line",
        "",
        "imagesvc tools lists the tools; imagesvc <tool> --<argument> <value> ... calls one, with the argument names",
        "above (aliases too). --json prints raw JSON, and on failure the JSON error shape, with exit status 1 (2 for a",
        "bad command line). --url or IMAGESVC_URL names the MCP endpoint (default: the local server at IMAGESVC_PORT);",
        "--key or IMAGESVC_KEY sends a key.",
        "",
    ]
    return "\n".join(lines)
