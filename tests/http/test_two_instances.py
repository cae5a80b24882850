"""Two app instances sharing one Redis: budgets and request limits stay exact across both."""

from __future__ import annotations

import asyncio
import time

from imagesvc.access import MILLI
from imagesvc.access.identity import sign_session
from imagesvc.web.app_keys import ACCESS
from tests.http.conftest import MakeClient

THUMB = {"book": "demo-speculum-fornacum", "page": "1", "tier": "thumb"}


async def test_budget_is_exact_across_two_instances(make_client: MakeClient, redis_server: str) -> None:
    """1,000 concurrent requests split over two instances against 500 remaining units: exactly 500 delivered."""
    first = await make_client(access_backend="redis", redis_url=redis_server)
    second = await make_client(access_backend="redis", redis_url=redis_server)
    user = f"reader-{time.time_ns()}"  # the Redis server lives for the session: a fresh subject per test
    token = sign_session(user, int(time.time()) + 3600, "test-secret")
    headers = {"Authorization": f"Bearer {token}"}
    access = first.server.app[ACCESS]
    reservation = await access.reserve(f"user:{user}", "images", 500 * MILLI, 1000 * MILLI)
    assert await access.commit(reservation)

    async def one(i: int) -> int:
        client = first if i % 2 else second
        async with client.get("/api/image", params=THUMB, headers=headers) as resp:
            await resp.read()
            return resp.status

    statuses = await asyncio.gather(*(one(i) for i in range(1000)))
    assert statuses.count(200) == 500
    assert statuses.count(429) == 500
    for client in (first, second):
        quota = await (await client.get("/api/rate_limit", headers=headers)).json()
        assert quota["pools"]["images"]["used"] == 1000


async def test_request_limit_is_shared(make_client: MakeClient, redis_server: str) -> None:
    first = await make_client(access_backend="redis", redis_url=redis_server, trusted_proxies=("127.0.0.1",))
    second = await make_client(access_backend="redis", redis_url=redis_server, trusted_proxies=("127.0.0.1",))
    address = f"198.51.100.{time.time_ns() % 250 + 1}"
    headers = {"X-Forwarded-For": address}
    statuses = [(await (first if i % 2 else second).get("/api/books", headers=headers)).status for i in range(61)]
    assert statuses[:60] == [200] * 60
    assert statuses[60] == 429
