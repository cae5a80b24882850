"""Liveness and readiness, for orchestrators and load balancers.

``GET /health/live`` says the process runs and its event loop turns: it touches no dependency and answers at once,
so a hung database never gets a node restarted. ``GET /health/ready`` says the node can serve everything: the
catalog, the access backend and the object store each answer within a short deadline (the catalog's own,
``IMAGESVC_CATALOG_DEADLINE``), and, in a serving process, the search warm-up has finished. Otherwise 503
``unavailable`` whose ``down`` names the dependencies that did not answer (by role, never by host or port).
``/health`` keeps its fuller report for people.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from aiohttp import web

from imagesvc.errors import Unavailable
from imagesvc.web.app_keys import ACCESS, SERVICES, WARM_UP
from imagesvc.web.params import accepts

__all__ = ["live", "ready"]


@accepts({"properties": {}})
async def live(request: web.Request, arguments: dict[str, Any]) -> web.Response:
    """The process runs: always 200, at once; no dependency is asked."""
    return web.json_response({"status": "live"})


@accepts({"properties": {}})
async def ready(request: web.Request, arguments: dict[str, Any]) -> web.Response:
    """200 when the catalog, the access backend and the object store answer within the catalog deadline and the
    search warm-up (serving processes) has finished; else 503 ``unavailable`` naming what is down."""
    app = request.app
    services = app[SERVICES]
    deadline = services.settings.catalog_deadline
    catalog, access, store = await asyncio.gather(
        services.catalog.gate.answers(),
        _answers(app[ACCESS].ping(), deadline),
        _answers(services.store.ping(), deadline),
    )
    checks = {"catalog": catalog, "access": access, "store": store}
    warm_up = app.get(WARM_UP)
    if warm_up is not None:
        checks["search"] = warm_up.done()
    down = [name for name, up in checks.items() if not up]
    if down:
        raise Unavailable(
            f"Not ready: {', '.join(down)} {'is' if len(down) == 1 else 'are'} not answering.",
            retry_after=2,
            details={"down": down, "checks": _words(checks)},
        )
    return web.json_response({"status": "ready", "checks": _words(checks)})


async def _answers(ping: Awaitable[None], deadline: float) -> bool:
    try:
        await asyncio.wait_for(ping, deadline)
    except (Unavailable, TimeoutError, OSError):
        return False
    return True


def _words(checks: dict[str, bool]) -> dict[str, str]:
    return {name: ("ok" if up else "warming" if name == "search" else "down") for name, up in checks.items()}
