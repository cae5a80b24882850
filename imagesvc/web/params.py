"""Query strings read through a JSON schema: the one way every route takes its parameters.

A route declares its query parameters once, as the input schema of the tool it calls (``rest.tool_route``) or as a
small schema of its own (``accepts``). The same declaration parses the request, answers 400 for an unknown, repeated
or ill-typed parameter (naming it and the accepted ones), and is what OpenAPI and ``/llms.txt`` document.

Strings become the schema's type: ``integer``, ``number``, ``boolean`` (read as settings are, ``settings.parse_bool``:
true/false, 1/0, yes/no, on/off) and ``array`` (a comma list, a repeated parameter, or both). An empty value counts as
absent, as an empty field of an HTML form does.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from aiohttp import web

from imagesvc.errors import InvalidRequest
from imagesvc.settings import parse_bool
from imagesvc.surface.arguments import (
    ALIASES,
    canonical,
    refuse_not_text,
    unknown_name,
    validate,
    whole_numbers,
    with_defaults,
)

__all__ = [
    "ANY",
    "BODY_SCHEMA",
    "NONE",
    "QUERY_SCHEMA",
    "UndeclaredParameters",
    "accepts",
    "any_query",
    "body_schema",
    "check_declared",
    "coerce",
    "declare_body",
    "query_arguments",
    "query_schema",
    "route_name",
    "strict",
    "text_only",
]

QUERY_SCHEMA = "query_schema"  # the attribute under which a handler carries its declared query parameters
BODY_SCHEMA = "body_schema"  # ... and its declared request body: {media type: schema}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def route_name(request: web.Request) -> str:
    """``GET /api/books/{book_id}``: how an error names the route a parameter was sent to."""
    resource = request.match_info.route.resource
    return f"{request.method} {resource.canonical if resource is not None else request.path}"


# A number in a query string is written as JSON writes one, in ASCII digits: Python's int() and float() would also
# take "1_000", "٣", "５" and "nan", which no other door accepts.
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?", re.ASCII)


def coerce(raw: str, prop: dict[str, Any]) -> Any:
    """One query value as the schema's type; a value that does not parse is passed on for validation to refuse."""
    kind = prop.get("type")
    text = raw.strip()
    if kind in ("integer", "number") and not _NUMBER.fullmatch(text):
        return raw
    if kind == "integer":
        try:
            return int(text)
        except ValueError:
            pass
        try:  # "5.0" is 5, as a JSON 5.0 is on every other door (surface.arguments.whole_numbers)
            number = float(text)
        except ValueError:
            return raw
        return int(number) if number.is_integer() else raw
    if kind == "number":
        try:
            value = float(text)
        except ValueError:
            return raw
        return value if math.isfinite(value) else raw
    if kind == "boolean":
        try:
            return parse_bool(text)
        except ValueError:
            return raw
    return raw


def _names(schema: dict[str, Any]) -> dict[str, str]:
    """Every accepted name (canonical and alias) -> its canonical name."""
    out = {}
    for name, prop in schema.get("properties", {}).items():
        out[name] = name
        out.update({alias: name for alias in prop.get(ALIASES, [])})
    return out


def query_arguments(request: web.Request, schema: dict[str, Any], *, skip: Iterable[str] = ()) -> dict[str, Any]:
    """The query string of ``request`` as typed arguments of ``schema``; ``skip`` names the path's parameters.

    400 for a name the schema does not take (or that the path already gives) and for a scalar given twice. Values
    that do not parse stay strings, for the schema's validation to refuse; aliases keep their name for
    ``surface.arguments.canonical`` to rename (and to refuse alongside their canonical name).
    """
    where = route_name(request)
    skipped = set(skip)
    names = _names(schema)
    props = schema.get("properties", {})
    out: dict[str, Any] = {}
    for key in dict.fromkeys(request.query.keys()):
        if key not in names or names[key] in skipped:
            raise unknown_name(where, key, schema, skip=skipped)
        prop = props[names[key]]
        values = [v for v in request.query.getall(key) if v.strip() != ""]
        if prop.get("type") == "array":
            parts = [p.strip() for v in values for p in v.split(",") if p.strip()]
            if parts:
                out[key] = [coerce(p, prop.get("items", {})) for p in parts]
            continue
        if len(values) > 1:
            message = f"{where}: {key!r} is given {len(values)} times; give it once."
            raise InvalidRequest(message, details={"parameter": key})
        if values:
            out[key] = coerce(values[0], prop)
    return out


def accepts(schema: dict[str, Any]) -> Callable[[Callable[..., Awaitable[web.StreamResponse]]], Handler]:
    """Declare a route's query parameters: the handler is called as ``handler(request, arguments)`` with them parsed,
    validated and defaulted, and carries ``schema`` for the documents. ``{"properties": {}}`` takes none."""
    strict = {"type": "object", "additionalProperties": False, **schema}

    def wrap(func: Callable[..., Awaitable[web.StreamResponse]]) -> Handler:
        @functools.wraps(func)
        async def handler(request: web.Request) -> web.StreamResponse:
            where = route_name(request)
            arguments = whole_numbers(strict, canonical(where, strict, query_arguments(request, strict)))
            validate(where, strict, arguments)
            return await func(request, with_defaults(strict, arguments))

        setattr(handler, QUERY_SCHEMA, strict)
        return handler

    return wrap


def query_schema(handler: Any) -> dict[str, Any] | None:
    """The query parameters ``handler`` declared (a tool's input schema or its own), or None: it takes any."""
    return getattr(handler, QUERY_SCHEMA, None)


def any_query(handler: Handler) -> Handler:
    """Mark a handler that ignores its query string (a static file host, where caches add cache-busting strings)."""
    setattr(handler, QUERY_SCHEMA, ANY)
    return handler


ANY: dict[str, Any] = {"type": "object"}  # the declaration of ``any_query``: every parameter accepted and ignored


def strict(handler: Handler) -> Handler:
    """``handler`` as it is when it declares its parameters, else wrapped to take none (a 400 names any it gets)."""
    if query_schema(handler) is not None:
        return handler

    @functools.wraps(handler)
    async def checked(request: web.Request) -> web.StreamResponse:
        for key in request.query:
            raise unknown_name(route_name(request), key, NONE)
        return await handler(request)

    setattr(checked, QUERY_SCHEMA, NONE)
    return checked


NONE: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": {}}


def text_only(handler: Handler) -> Handler:
    """``handler`` behind the one text check of a URL (``surface.arguments.refuse_not_text``): a path segment or a
    query value holding NUL is a 400 naming it before any handler reads it, on every route: a page's slug, an IIIF
    identifier or an image path as much as a tool's argument. (A query string cannot carry a lone surrogate: its
    undecodable bytes read as U+FFFD; bodies are checked where their arguments meet the tool's schema.)"""

    @functools.wraps(handler)
    async def checked(request: web.Request) -> web.StreamResponse:
        where = route_name(request)
        for name, value in (*request.match_info.items(), *request.query.items()):
            refuse_not_text(where, name, value)
        return await handler(request)

    return checked


def declare_body(handler: Any, content: dict[str, dict[str, Any]]) -> None:
    """Declare the body ``handler`` reads: ``{media type: JSON schema}``, as OpenAPI's requestBody writes it."""
    setattr(handler, BODY_SCHEMA, content)


def body_schema(handler: Any) -> dict[str, dict[str, Any]] | None:
    """The request body ``handler`` declared, or None."""
    return getattr(handler, BODY_SCHEMA, None)


# What reading parameters looks like in a handler's code: attributes of the request it touches.
_QUERY_READS = frozenset({"query", "rel_url", "query_string"})
_BODY_READS = frozenset({"multipart", "post", "json", "content", "read", "text"})


class UndeclaredParameters(RuntimeError):
    """A route that reads parameters it does not declare: raised at start-up, never while serving."""


def _touched(code: Any) -> set[str]:
    """The attribute names ``code`` (and the functions defined inside it) loads."""
    import dis

    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_ATTR", "LOAD_METHOD")}
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            names |= _touched(const)
    return names


def check_declared(handler: Any, where: str) -> None:
    """Refuse ``handler`` when its code reads the query string without a declared query schema, or a body (form,
    JSON, upload) without a declared body: such a route would refuse every parameter it documents (``strict`` takes
    an undeclared route to take none). Read from the handler's own bytecode, unwrapped; helpers it calls are
    trusted to be called with declared parameters."""
    import inspect

    inner = inspect.unwrap(handler)
    code = getattr(inner, "__code__", None)
    if code is None:
        return
    touched = _touched(code)
    if touched & _QUERY_READS and query_schema(handler) is None:
        raise UndeclaredParameters(
            f"{where} reads the query string ({', '.join(sorted(touched & _QUERY_READS))}) but declares no query "
            "parameters: use params.accepts, rest.tool_route, or set its QUERY_SCHEMA."
        )
    if touched & _BODY_READS and body_schema(handler) is None:
        raise UndeclaredParameters(
            f"{where} reads the request body ({', '.join(sorted(touched & _BODY_READS))}) but declares none: "
            "declare it with params.declare_body."
        )
