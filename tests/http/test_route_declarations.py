"""``add_routes`` refuses, at start-up, a route that reads parameters it does not declare: such a route would answer
"Accepted: none" to every parameter its documentation promises."""

from __future__ import annotations

import pytest
from aiohttp import web

from imagesvc.web import routes
from imagesvc.web.params import UndeclaredParameters, accepts


async def _reads_the_query(request: web.Request) -> web.Response:
    return web.json_response({"limit": request.query.get("limit")})


async def _reads_a_form(request: web.Request) -> web.Response:
    form = await request.post()
    return web.json_response({"fields": len(form)})


@accepts({"properties": {"limit": {"type": "integer"}}})
async def _declared(request: web.Request, arguments: dict[str, int]) -> web.Response:
    return web.json_response(arguments)


@pytest.mark.parametrize(
    ("handler", "what"), [(_reads_the_query, "reads the query string"), (_reads_a_form, "reads the request body")]
)
def test_a_route_reading_undeclared_parameters_stops_the_start_up(
    monkeypatch: pytest.MonkeyPatch, handler: object, what: str
) -> None:
    monkeypatch.setattr(routes, "ROUTES", (*routes.ROUTES, routes.Route("POST", "/sneaky", handler)))
    with pytest.raises(UndeclaredParameters, match=f"POST /api/sneaky {what}"):
        routes.add_routes(web.Application(), "/api")


def test_every_route_of_the_service_and_a_declared_one_mount(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(routes, "ROUTES", (*routes.ROUTES, routes.Route("GET", "/declared", _declared)))
    app = web.Application()
    routes.add_routes(app, "/api")
    assert "/api/declared" in {r.resource.canonical for r in app.router.routes() if r.resource is not None}
