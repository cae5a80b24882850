"""RateLimit header values (IETF draft -10 syntax) and the 429 error a caller sees, per caller class."""

from __future__ import annotations

from imagesvc.access import Allowed, Denied, PoolState
from imagesvc.access.headers import next_steps, policy_value, rate_headers, rate_limited, ratelimit_value
from imagesvc.access.policy import caller_class


def test_header_values_follow_the_draft_syntax() -> None:
    assert policy_value([("images", 500, 86400), ("requests", 60, 3600)]) == (
        '"images";q=500;w=86400, "requests";q=60;w=3600'
    )
    assert ratelimit_value([("images", 412, 5400)]) == '"images";r=412;t=5400'
    assert ratelimit_value([("images", 412, 0), ("requests", 0, 7)]) == '"images";r=412, "requests";r=0;t=7'
    assert policy_value([('a"b\\', 1, 2)]) == '"a\\"b\\\\";q=1;w=2'


def test_anonymous_response_headers_list_the_pool_and_the_request_limit() -> None:
    pools = {"images": PoolState(used=88, limit=500, remaining=412, reset_seconds=0)}
    headers = rate_headers(caller_class("anonymous"), pools, Allowed(remaining=59, reset=3600))
    assert headers == {
        "RateLimit-Policy": '"images";q=500;w=86400, "requests";q=60;w=3600',
        "RateLimit": '"images";r=412, "requests";r=59;t=3600',
    }
    full = {"text": PoolState(used=500, limit=500, remaining=0, reset_seconds=5400)}
    assert rate_headers(caller_class("anonymous"), full)["RateLimit"] == '"text";r=0;t=5400'


def test_uncapped_and_exempt_callers_advertise_only_what_limits_them() -> None:
    uncapped = {"images": PoolState(used=10_000, limit=None, remaining=None, reset_seconds=0)}
    paid = rate_headers(caller_class("key:domain"), uncapped, Allowed(remaining=299, reset=60))
    assert paid == {"RateLimit-Policy": '"requests";q=300;w=60', "RateLimit": '"requests";r=299;t=60'}
    assert rate_headers(caller_class("crawler"), uncapped, Allowed(remaining=None, reset=0)) == {}


def test_budget_429_tells_an_anonymous_caller_how_to_get_more() -> None:
    error = rate_limited(caller_class("anonymous"), "images", Denied(used=500, limit=500, retry_after_seconds=5400))
    body = error.to_dict()
    assert error.status == 429 and body["error"] == "rate_limited"
    assert {k: body[k] for k in ("pool", "used", "limit", "retry_after_seconds")} == {
        "pool": "images",
        "used": 500,
        "limit": 500,
        "retry_after_seconds": 5400,
    }
    assert [s["action"] for s in body["next_steps"]] == ["sign_in", "get_free_key", "paid_key"]
    assert body["next_steps"][2]["caller_class"] == "key:language"
    assert "5400 seconds" in body["message"] and body["recovery"][0].startswith("Retry after 5400 seconds")
    assert error.headers == {
        "Retry-After": "5400",
        "RateLimit-Policy": '"images";q=500;w=86400',
        "RateLimit": '"images";r=0;t=5400',
    }


def test_next_steps_depend_on_the_caller_class() -> None:
    assert [s["caller_class"] for s in next_steps(caller_class("signed_in"), "text")] == ["key:free", "key:language"]
    assert [s["caller_class"] for s in next_steps(caller_class("key:free"), "images")] == ["key:language"]
    # Request limits: the lowest paid tier faster than the caller's own.
    assert [s["caller_class"] for s in next_steps(caller_class("key:language"), "requests")] == ["key:domain"]
    assert next_steps(caller_class("key:enterprise"), "requests") == []
    # A signed-in caller's 1,000/hour is slower than a free key's 60/minute, so the free key helps.
    assert [s["action"] for s in next_steps(caller_class("signed_in"), "requests")] == ["get_free_key", "paid_key"]


def test_retry_after_is_a_whole_second_at_least_one() -> None:
    error = rate_limited(caller_class("key:free"), "requests", Denied(used=60, limit=60, retry_after_seconds=0))
    assert error.headers["Retry-After"] == "1" and error.details["retry_after_seconds"] == 1
    assert error.headers["RateLimit-Policy"] == '"requests";q=60;w=60'
    assert "per minute" in error.message
