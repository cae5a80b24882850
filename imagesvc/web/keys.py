"""Typed application keys: the one place that names what ``build_app`` stores on the app."""

from __future__ import annotations

from aiohttp import web

from imagesvc.access import AccessState
from imagesvc.access.identity import Caller, Identifier
from imagesvc.access.meter import Meter
from imagesvc.services import Services

__all__ = ["ACCESS", "CALLER", "IDENTIFIER", "METER", "RATE_HEADERS", "REQUEST_ID", "SERVICES"]

SERVICES = web.AppKey("services", Services)
ACCESS = web.AppKey("access", AccessState)
IDENTIFIER = web.AppKey("identifier", Identifier)

REQUEST_ID = web.RequestKey("request_id", str)
CALLER = web.RequestKey("caller", Caller)
METER = web.RequestKey("meter", Meter)
RATE_HEADERS = web.RequestKey("rate_headers", dict)
