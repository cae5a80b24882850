"""The caller's own figures: ``GET /rate_limit`` (free, counts nothing) and ``GET /dataset/v1/usage`` (keys only)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from imagesvc.access import METER_DAYS, MILLI, POOLS, public_state, whole_units
from imagesvc.access.headers import next_steps
from imagesvc.errors import Unauthorized
from imagesvc.web.app_keys import ACCESS, CALLER, IDENTIFIER
from imagesvc.web.params import accepts

__all__ = ["rate_limit", "usage"]


@accepts({"properties": {}})
async def rate_limit(request: web.Request, arguments: dict[str, Any]) -> web.Response:
    """Who the service takes the caller for, and each pool's limit, use and reset, without counting anything."""
    caller = await request.app[IDENTIFIER].identify(request.headers, request.remote, request.cookies)
    allowance = caller.allowance
    access = request.app[ACCESS]
    pools = {}
    for pool in POOLS:
        limit = allowance.budget(pool)
        exact = await access.usage(caller.subject, pool, None if limit is None else limit * MILLI, need=MILLI)
        state = public_state(exact)  # whole units: remaining rounded down, used = limit - remaining
        pools[pool] = {
            "limit": state.limit,
            "used": state.used,
            "remaining": state.remaining,
            "window_seconds": 86400,
            "reset_seconds": state.reset_seconds,
            "used_exact": exact.used / MILLI,
        }
    return web.json_response(
        {
            "caller": {"kind": caller.kind, "class": allowance.name, "label": allowance.label, "key": caller.key_ref},
            "pools": pools,
            "requests": {"limit": allowance.request_limit(), "window_seconds": allowance.request_window},
            "clean_allowed": allowance.clean_allowed,
            "next_steps": next_steps(allowance, "images"),
        }
    )


USAGE_PARAMS = {
    "properties": {
        "days": {"type": "integer", "minimum": 1, "maximum": METER_DAYS, "default": 30, "description": "Days back."}
    }
}


@accepts(USAGE_PARAMS)
async def usage(request: web.Request, arguments: dict[str, Any]) -> web.Response:
    """The key's meter: per UTC day and pool, requests and units delivered, the last ``days`` days (at most 90).

    ``units`` is whole units rounded up; ``units_exact`` the exact figure (thousandths kept)."""
    caller = request[CALLER]
    if caller.key_ref is None:
        raise Unauthorized(
            "The usage meter belongs to an API key; this request carried none.",
            recovery=["Send your key as 'Authorization: Bearer <key>'."],
        )
    days = arguments["days"]
    rows = [
        {**row, "units": whole_units(row["units"]), "units_exact": row["units"] / MILLI}
        for row in await request.app[ACCESS].daily_usage(caller.subject, days)
    ]
    return web.json_response({"key": caller.key_ref, "tier": caller.allowance.name, "days": days, "usage": rows})
