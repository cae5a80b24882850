"""The private parts of aiohttp that web/protocol.py leans on (no public hook sets the connection handler's class):
this fails loudly, naming the part, when an aiohttp release changes one of them."""

from __future__ import annotations

import inspect

import aiohttp
import pytest
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from imagesvc.web.protocol import Application, JsonErrorsRequestHandler


def test_aiohttp_is_the_minor_version_protocol_py_was_written_for() -> None:
    assert aiohttp.__version__.startswith("3.14."), "check web/protocol.py against this aiohttp, then move the pin"


def test_the_private_parts_have_the_shape_protocol_py_uses() -> None:
    make = inspect.signature(web.Application._make_handler)
    assert {"loop", "access_log_class"} <= make.parameters.keys()
    handle_error = list(inspect.signature(RequestHandler.handle_error).parameters)
    assert handle_error == ["self", "request", "status", "exc", "message"]
    assert list(inspect.signature(RequestHandler.__init__).parameters)[:2] == ["self", "manager"]


async def test_every_connection_gets_the_json_errors_handler() -> None:
    runner = web.AppRunner(Application(handler_args={"metrics": None}))
    await runner.setup()
    try:
        server = runner.server
        assert server is not None and type(server).__mro__[1] is web.Server
        handler = server()
        assert isinstance(handler, JsonErrorsRequestHandler)
        assert handler.metrics is None
    finally:
        await runner.cleanup()


async def test_a_server_of_another_shape_is_refused_at_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a release that builds its server differently looks like: start-up fails, naming the file to update."""

    class Other(web.Server):
        pass

    make = web.Application._make_handler

    def other(self: web.Application, **kwargs: object) -> web.Server:
        server = make(self, **kwargs)
        server.__class__ = Other
        return server

    monkeypatch.setattr(web.Application, "_make_handler", other)
    runner = web.AppRunner(Application())
    with pytest.raises(RuntimeError, match=r"web/protocol\.py"):
        await runner.setup()
    await runner.cleanup()
