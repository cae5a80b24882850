"""A tool's arguments against its input schema: aliases, unknown names, types and limits, defaults.

Every door (REST, MCP, CLI) ends here, so one name, one rule and one error message hold on all of them. A property
may list other accepted names under ``x-aliases``; they are renamed to the canonical name before validation.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterable
from typing import Any

import jsonschema

from imagesvc.errors import InvalidRequest

__all__ = [
    "ALIASES",
    "YEAR",
    "accepted_names",
    "canonical",
    "closest",
    "not_text",
    "refuse_not_text",
    "unknown_name",
    "validate",
    "whole_numbers",
    "with_defaults",
]

ALIASES = "x-aliases"
# A year parameter: bounded, like every whole number a tool takes (the catalog stores 64-bit integers).
YEAR = {"type": "integer", "minimum": -9999, "maximum": 9999}


def accepted_names(schema: dict[str, Any], skip: Iterable[str] = ()) -> list[str]:
    """The canonical names of ``schema``'s properties (less ``skip``), each followed by its aliases in brackets."""
    skipped = set(skip)
    out = []
    for name, prop in schema.get("properties", {}).items():
        if name in skipped:
            continue
        aliases = prop.get(ALIASES, [])
        out.append(f"{name} (or {', '.join(aliases)})" if aliases else name)
    return out


def _squash(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")


def closest(name: str, schema: dict[str, Any], skip: Iterable[str] = ()) -> str | None:
    """The canonical name ``name`` most likely meant: same letters in another case or spelling (``maxperbook``,
    ``max-per-book``), else the nearest of all accepted names and aliases by ``difflib``."""
    skipped = set(skip)
    to_canonical = {}
    for canon, prop in schema.get("properties", {}).items():
        if canon not in skipped:
            to_canonical.update({n: canon for n in [canon, *prop.get(ALIASES, [])]})
    for known, canon in to_canonical.items():
        if _squash(known) == _squash(name):
            return canon
    found = difflib.get_close_matches(name, list(to_canonical), n=1, cutoff=0.6)
    return to_canonical[found[0]] if found else None


def unknown_name(where: str, name: str, schema: dict[str, Any], *, skip: Iterable[str] = ()) -> InvalidRequest:
    """The 400 for a parameter ``where`` (a tool or a route) does not take: names it, the closest, and the rest."""
    accepted = accepted_names(schema, skip)
    close = closest(name, schema, skip)
    hint = f" Did you mean {close!r}?" if close else ""
    listed = ", ".join(accepted) if accepted else "none"
    return InvalidRequest(
        f"{where} has no parameter {name!r}.{hint} Accepted: {listed}.",
        recovery=[f"Use {close!r} instead of {name!r}." if close else f"Remove {name!r}."],
        details={"parameter": name, "accepted": [a.split()[0] for a in accepted], "did_you_mean": close},
    )


def canonical(where: str, schema: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` with every alias renamed to its property's canonical name; both given is a 400."""
    out = dict(arguments)
    for name, prop in schema.get("properties", {}).items():
        for alias in prop.get(ALIASES, []):
            if alias not in out:
                continue
            if name in out:
                raise InvalidRequest(
                    f"{where}: {alias!r} is another name for {name!r}; give only one of them.",
                    details={"parameter": alias},
                )
            out[name] = out.pop(alias)
    return out


def _describe(error: jsonschema.ValidationError, where: str) -> tuple[str, str]:
    """(the offending parameter, a sentence a person can act on) for one schema violation."""
    path = [str(p) for p in error.absolute_path]
    name = path[0] if path else "arguments"
    shown = ".".join(path) or "arguments"
    value, rule = error.instance, error.validator_value
    got = json.dumps(value, ensure_ascii=False)[:80]
    rules: dict[str, Callable[[], str]] = {
        "type": lambda: f"must be {_kind(rule)}; got {got}.",
        "minimum": lambda: f"must be at least {rule}; got {got}.",
        "maximum": lambda: f"must be at most {rule}; got {got}.",
        "enum": lambda: f"must be one of {', '.join(map(str, rule))}; got {got}.",
        "minLength": lambda: "must not be empty." if rule == 1 else f"is too short; got {got}.",
        "maxLength": lambda: f"must be at most {rule} characters long.",
        "maxItems": lambda: f"takes at most {rule} items; got {len(value)}.",
        "minItems": lambda: f"needs at least {rule} item(s).",
        "uniqueItems": lambda: "lists an item twice.",
    }
    if error.validator == "required":
        missing = next((r for r in rule if isinstance(value, dict) and r not in value), rule[0])
        return missing, f"{where}: {missing!r} is required."
    explain = rules.get(str(error.validator))
    return name, f"{where}: {shown!r} " + (explain() if explain else f"is not valid: {error.message}.")


def _kind(rule: Any) -> str:
    names = {"integer": "a whole number", "number": "a number", "boolean": "true or false", "string": "a string"}
    names |= {"array": "a list", "object": "an object"}
    kinds = rule if isinstance(rule, list) else [rule]
    return " or ".join(names.get(k, str(k)) for k in kinds)


def not_text(value: Any) -> str | None:
    """What in ``value``'s strings (nested in lists and dicts too) no text may hold, or None: NUL, which neither
    catalog stores (PostgreSQL refuses it in text) and no id, query or cursor means, or a lone surrogate
    (``"\\ud800"`` is valid JSON and a Python str, but no Unicode text: UTF-8 cannot encode it)."""
    if isinstance(value, str):
        if "\x00" in value:
            return "NUL (U+0000)"
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                return f"U+{ord(value[exc.start]):04X}, a lone surrogate"
        return None
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return next((found for item in items if (found := not_text(item))), None)


def refuse_not_text(where: str, name: str, value: Any) -> None:
    """``InvalidRequest`` naming parameter ``name`` when ``value`` holds what no text may hold (``not_text``): the one
    check of every door, for arguments, path segments, query strings, form fields and decoded cursors alike."""
    if (found := not_text(value)) is not None:
        raise InvalidRequest(
            f"{where}: {name} holds {found}, which is not text.",
            recovery=[
                "Send text as UTF-8 without NUL; a surrogate pair (\\ud83d\\ude00) is one character, a lone half none."
            ],
            details={"parameter": name},
        )


def validate(where: str, schema: dict[str, Any], arguments: dict[str, Any]) -> None:
    """``InvalidRequest`` naming the first parameter that holds what no text may hold (``not_text``) or breaks
    ``schema`` (unknown names first), else nothing."""
    for name, value in arguments.items():
        refuse_not_text(where, name, value)
    known = set(schema.get("properties", {}))
    if schema.get("additionalProperties") is False:
        for name in arguments:
            if name not in known:
                raise unknown_name(where, name, schema)
    if _plainly_valid(schema, arguments):
        return
    errors = list(_validator(schema).iter_errors(arguments))
    if not errors:
        return
    order = list(schema.get("properties", {}))
    first = min(errors, key=lambda e: (order.index(e.path[0]) if e.path and e.path[0] in order else -1, str(e)))
    name, message = _describe(first, where)
    raise InvalidRequest(
        message,
        recovery=[f"See the parameters of {where} in /llms.txt, /api/openapi.json or MCP tools/list."],
        details={"parameter": name},
    )


_TYPES: dict[str, tuple[type, ...]] = {"integer": (int,), "number": (int, float), "string": (str,), "boolean": (bool,)}
_PLAIN = frozenset({"type", "minimum", "maximum", "enum", "minLength", "maxLength", "default", "description", ALIASES})


def _plainly_valid(schema: dict[str, Any], arguments: dict[str, Any]) -> bool:
    """True when every argument is a scalar that meets its property's simple rules (type, bounds, enum, length):
    the common case, checked in microseconds. False means "ask jsonschema", which also writes the message."""
    props = schema.get("properties", {})
    if any(name not in arguments for name in schema.get("required", ())):
        return False
    for name, value in arguments.items():
        prop = props.get(name)
        if prop is None or not _PLAIN.issuperset(prop) or isinstance(value, bool) != (prop.get("type") == "boolean"):
            return False
        kind = prop.get("type")
        if kind is not None and not isinstance(value, _TYPES.get(kind, ())):
            return False
        if "enum" in prop and value not in prop["enum"]:
            return False
        if ("minimum" in prop and value < prop["minimum"]) or ("maximum" in prop and value > prop["maximum"]):
            return False
        if ("minLength" in prop and len(value) < prop["minLength"]) or (
            "maxLength" in prop and len(value) > prop["maxLength"]
        ):
            return False
    return True


_VALIDATORS: dict[int, tuple[dict[str, Any], jsonschema.Draft202012Validator]] = {}


def _validator(schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    """One compiled validator per schema object: building one costs far more than using it, on every request."""
    cached = _VALIDATORS.get(id(schema))
    if cached is None or cached[0] is not schema:  # the schema is held, so its id is not reused while cached
        cached = _VALIDATORS[id(schema)] = (schema, jsonschema.Draft202012Validator(schema))
    return cached[1]


def _whole(value: Any, prop: dict[str, Any]) -> Any:
    if prop.get("type") == "integer" and isinstance(value, float) and value.is_integer():
        return int(value)
    if prop.get("type") == "array" and isinstance(value, list):
        items = prop.get("items", {})
        return [_whole(v, items) for v in value]
    return value


def whole_numbers(schema: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` with every whole-number float given for an integer property (``5.0``) made that integer (``5``).

    The one rule for integers on every door: JSON Schema counts ``5.0`` as an integer, and JSON encoders in other
    languages write whole numbers that way, so it is accepted as ``5``; ``5.5`` stays a float for validation to refuse.
    """
    props = schema.get("properties", {})
    out = dict(arguments)
    for name, value in arguments.items():
        prop = props.get(name)
        if prop is not None:
            out[name] = _whole(value, prop)
    return out


def with_defaults(schema: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` with each absent property that declares a ``default`` set to it."""
    out = dict(arguments)
    for name, prop in schema.get("properties", {}).items():
        if name not in out and "default" in prop:
            out[name] = prop["default"]
    return out
