"""Strict parsing of query-string parameters into tool arguments, with errors that name the parameter."""

from __future__ import annotations

from aiohttp import web

from imagesvc.errors import InvalidRequest

__all__ = ["INT_MAX", "bool_param", "int_param", "str_param"]

INT_MAX = 2**31 - 1


def int_param(
    request: web.Request,
    name: str,
    default: int | None = None,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    if maximum is None:
        maximum = INT_MAX  # nothing is counted past this, and SQLite integers stop at 2**63
    try:
        value = int(raw)
    except ValueError:
        raise InvalidRequest(
            f"Parameter {name!r} must be a whole number, not {raw!r}.", details={"parameter": name}
        ) from None
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        bounds = f"from {minimum}" + (f" to {maximum}" if maximum is not None else " upwards")
        raise InvalidRequest(f"Parameter {name!r} must be {bounds}; got {value}.", details={"parameter": name})
    return value


def bool_param(request: web.Request, name: str, default: bool) -> bool:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise InvalidRequest(f"Parameter {name!r} must be true or false, not {raw!r}.", details={"parameter": name})


def str_param(
    request: web.Request, name: str, default: str | None = None, *, choices: tuple[str, ...] = ()
) -> str | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    if choices and raw not in choices:
        raise InvalidRequest(
            f"Parameter {name!r} must be one of {', '.join(choices)}; got {raw!r}.", details={"parameter": name}
        )
    return raw
