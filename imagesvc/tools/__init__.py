"""The product surface: one async function per tool, registered with its JSON schemas.

REST handlers, the MCP endpoint and the CLI all call these functions through ``REGISTRY``; none re-implements them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from imagesvc.access.identity import Caller
from imagesvc.access.meter import Meter

__all__ = ["REGISTRY", "Call", "Tool", "call", "load_all", "tool"]


@dataclass(frozen=True)
class Tool:
    """A tool's name, description, schemas and implementation ``func(services, call, **arguments)``."""

    name: str
    description: str
    input_schema: dict[str, Any]
    func: Callable[..., Awaitable[dict[str, Any]]]
    output_schema: dict[str, Any] | None = None
    read_only: bool = True
    annotations: dict[str, Any] = field(default_factory=dict)


REGISTRY: dict[str, Tool] = {}


def tool(
    name: str, input_schema: dict[str, Any], *, output_schema: dict[str, Any] | None = None, read_only: bool = True
) -> Callable[[Callable[..., Awaitable[dict[str, Any]]]], Callable[..., Awaitable[dict[str, Any]]]]:
    """Register ``func`` as tool ``name``; its docstring's first paragraph is the description."""

    def register(func: Callable[..., Awaitable[dict[str, Any]]]) -> Callable[..., Awaitable[dict[str, Any]]]:
        doc = (func.__doc__ or "").strip().split("\n\n")[0]
        REGISTRY[name] = Tool(
            name=name,
            description=" ".join(doc.split()),
            input_schema={"type": "object", "additionalProperties": False, **input_schema},
            func=func,
            output_schema=output_schema,
            read_only=read_only,
        )
        return func

    return register


def load_all() -> dict[str, Tool]:
    """Import every tool module so the registry is complete."""
    from imagesvc.tools import (  # noqa: F401
        archive,
        book_text,
        books,
        dataset,
        gallery,
        image_search,
        quotes,
        vectors,
        within_book,
    )

    return REGISTRY


@dataclass
class Call:
    """Who is calling a tool and the meter its deliveries are charged to (settled by the door that delivers)."""

    caller: Caller
    meter: Meter


async def call(services: Any, name: str, arguments: dict[str, Any] | None, call: Call) -> dict[str, Any]:
    """Check ``arguments`` against the tool's input schema (aliases renamed, unknown names refused, defaults filled),
    then run it. Unknown tools are ``NotFound``; bad arguments are ``InvalidRequest`` naming the parameter."""
    from imagesvc.errors import NotFound
    from imagesvc.surface.arguments import canonical, validate, whole_numbers, with_defaults

    tools = load_all()
    if name not in tools:
        raise NotFound(
            f"There is no tool named {name!r}.",
            recovery=[f"Use one of: {', '.join(sorted(tools))}."],
        )
    spec = tools[name]
    arguments = whole_numbers(spec.input_schema, canonical(name, spec.input_schema, dict(arguments or {})))
    validate(name, spec.input_schema, arguments)
    return await spec.func(services, call, **with_defaults(spec.input_schema, arguments))
