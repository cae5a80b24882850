"""RateLimit-Policy and RateLimit header values (IETF httpapi draft -10) and the 429 error for an exhausted limit.

Both fields are Structured Field lists of string items with integer parameters: ``"images";q=500;w=86400`` (quota
per window, seconds) and ``"images";r=412;t=5400`` (remaining, seconds until units free up). Budgets roll, so nothing
"resets" while units remain: ``t`` is sent for a pool only when it is empty, and then equals ``Retry-After``; for the
request limit ``t`` is the time until the oldest counted request ages out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from imagesvc.access import BUDGET_WINDOW, Allowed, Denied, PoolState
from imagesvc.access.policy import CLASSES, PAGE_VIEWS_POOL, REQUESTS_POOL, CallerClass, Pace
from imagesvc.errors import RateLimited

__all__ = [
    "REQUESTS",
    "next_steps",
    "policy_value",
    "rate_headers",
    "rate_limited",
    "ratelimit_value",
]

REQUESTS = REQUESTS_POOL  # the policy name of the API's request limit; pools use their own names
_UNITS = {"text": "pages", "images": "images", REQUESTS: "requests", PAGE_VIEWS_POOL: "page views"}


def _sf_string(value: str) -> str:
    """An RFC 8941 sf-string: printable ASCII in quotes, with ``"`` and ``\\`` escaped."""
    if any(not 0x20 <= ord(ch) <= 0x7E for ch in value):
        raise ValueError(f"policy name {value!r} must be printable ASCII")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def policy_value(policies: Iterable[tuple[str, int, int]]) -> str:
    """``RateLimit-Policy`` from ``(name, quota, window seconds)`` triples, in the order given."""
    return ", ".join(f"{_sf_string(name)};q={quota};w={window}" for name, quota, window in policies)


def ratelimit_value(limits: Iterable[tuple[str, int, int]]) -> str:
    """``RateLimit`` from ``(name, remaining, reset seconds)`` triples; a reset of 0 leaves ``t`` out."""
    return ", ".join(
        f"{_sf_string(name)};r={max(0, remaining)}" + (f";t={reset}" if reset > 0 else "")
        for name, remaining, reset in limits
    )


def rate_headers(
    caller: CallerClass,
    pools: Mapping[str, PoolState],
    requests: Allowed | Denied | None = None,
    pace: Pace | None = None,
) -> dict[str, str]:
    """Both header values for a response: every capped pool given, then the per-window limit ``requests`` was
    counted against (``pace``; by default the caller's API request limit) if counted.

    Uncapped pools and exempt callers advertise nothing (there is no quota to state); the result may be empty.
    """
    policies: list[tuple[str, int, int]] = []
    limits: list[tuple[str, int, int]] = []
    for name, state in pools.items():
        if state.limit is not None and state.remaining is not None:
            policies.append((name, state.limit, BUDGET_WINDOW))
            limits.append((name, state.remaining, state.reset_seconds))
    pace = pace or caller.pace(people=False)
    if pace is not None and requests is not None:
        policies.append((pace.name, pace.quota, pace.window))
        if isinstance(requests, Allowed):
            limits.append((pace.name, requests.remaining or 0, requests.reset))
        else:
            limits.append((pace.name, 0, requests.retry_after_seconds))
    if not policies:
        return {}
    return {"RateLimit-Policy": policy_value(policies), "RateLimit": ratelimit_value(limits)}


def _allowance(caller: CallerClass, pool: str) -> float | None:
    """How much of ``pool`` a class allows, comparable across classes (requests as a rate per second)."""
    if pool in (REQUESTS, PAGE_VIEWS_POOL):
        pace = caller.pace(people=pool == PAGE_VIEWS_POOL)
        return None if pace is None else pace.quota / pace.window
    return caller.budget(pool)


def next_steps(caller: CallerClass, pool: str) -> list[dict[str, str]]:
    """Ways for this caller to get more of ``pool``, cheapest first: sign in, a free key, the lowest paid tier that
    helps. Empty when no class gives more (then only waiting helps)."""
    mine = _allowance(caller, pool)
    steps: list[dict[str, str]] = []
    for other in sorted(CLASSES.values(), key=lambda c: c.rank):
        if other.exempt or other.rank <= caller.rank:
            continue
        theirs = _allowance(other, pool)
        if mine is None or (theirs is not None and theirs <= mine):
            continue
        if other.name == "signed_in":
            how = "Sign in on the site"
            action = "sign_in"
        elif other.name == "key:free":
            how = "Request a free API key on the developer page and send it as 'Authorization: Bearer <key>'"
            action = "get_free_key"
        else:
            how = f"Use a paid key of the {other.name.removeprefix('key:')} tier"
            action = "paid_key"
        steps.append({"action": action, "caller_class": other.name, "description": f"{how}: {other.describe()}."})
        if other.paid:
            break  # the lowest paid tier that helps is the answer; higher tiers only cost more
    return steps


def rate_limited(caller: CallerClass, pool: str, denied: Denied) -> RateLimited:
    """The 429 error for ``denied`` on ``pool`` (a budget pool, or ``requests``), with its headers.

    Body: ``{error: "rate_limited", message, recovery, pool, used, limit, retry_after_seconds, next_steps}``;
    headers: ``Retry-After`` (whole seconds, at least 1, equal to ``retry_after_seconds``), ``RateLimit`` and
    ``RateLimit-Policy`` for the exhausted limit.
    """
    retry = max(1, int(denied.retry_after_seconds))
    unit = _UNITS.get(pool, "units")
    pace = caller.pace(people=pool == PAGE_VIEWS_POOL) if pool in (REQUESTS, PAGE_VIEWS_POOL) else None
    window = pace.window if pace is not None else BUDGET_WINDOW
    span = {60: "minute", 3600: "hour", BUDGET_WINDOW: "24 hours"}.get(window, f"{window} seconds")
    steps = next_steps(caller, pool)
    message = (
        f"{caller.label} callers may have {denied.limit:,} {unit} per {span}; {denied.used:,} are counted now. "
        f"More become available in {retry} seconds."
    )
    recovery = [f"Retry after {retry} seconds (the Retry-After header)."] + [s["description"] for s in steps]
    details: dict[str, Any] = {
        "pool": pool,
        "used": denied.used,
        "limit": denied.limit,
        "retry_after_seconds": retry,
        "next_steps": steps,
    }
    headers = {
        "Retry-After": str(retry),
        "RateLimit-Policy": policy_value([(pool, denied.limit, window)]),
        "RateLimit": ratelimit_value([(pool, 0, retry)]),
    }
    return RateLimited(message, recovery=recovery, details=details, headers=headers)
