"""JSON request bodies read one way: strict (no NaN or Infinity), nested at most ``MAX_DEPTH`` levels, errors as 400s.

Python's parser recurses once per level, so a body of a few kilobytes nested thousands deep raises
``RecursionError``; every route that reads a JSON body parses it here (``/mcp`` has its own JSON-RPC wrapper with the
same bound, ``mcp_wire``).
"""

from __future__ import annotations

import json
import math
from typing import Any

from imagesvc.errors import InvalidRequest

__all__ = ["MAX_DEPTH", "parse_object", "too_deep"]

MAX_DEPTH = 32  # arrays and objects within each other: no argument of any tool nests more than a few levels


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """True when ``value`` nests arrays and objects deeper than ``limit`` (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        if children and depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def _finite(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return False
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def parse_object(raw: bytes, what: str = "The JSON body") -> dict[str, Any]:
    """``raw`` as a JSON object; ``InvalidRequest`` for anything else, a nesting past ``MAX_DEPTH`` included."""
    deep = InvalidRequest(
        f"{what} nests more than {MAX_DEPTH} levels deep.", recovery=["Send the arguments as one flat object."]
    )
    try:
        value = json.loads(raw, parse_constant=_refuse_constant)
    except RecursionError:
        raise deep from None
    except (ValueError, UnicodeDecodeError):
        raise InvalidRequest(f"{what} is not valid JSON.", recovery=["Send a UTF-8 JSON object."]) from None
    if too_deep(value):
        raise deep
    if not _finite(value):
        raise InvalidRequest(f"{what} holds a number too large for a double.")
    if not isinstance(value, dict):
        raise InvalidRequest(f"{what} must be an object of the tool's arguments.")
    return value
