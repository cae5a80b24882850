"""Typed application keys: the one place that names what ``build_app`` stores on the app."""

from __future__ import annotations

import asyncio

from aiohttp import web

from imagesvc.access import AccessState
from imagesvc.access.identity import Caller, Identifier
from imagesvc.access.ledger import Ledger
from imagesvc.access.meter import Meter
from imagesvc.errors import ImagesvcError
from imagesvc.iiif.delivery import IiifRuntime
from imagesvc.observability import Metrics
from imagesvc.services import Services
from imagesvc.web.health_counts import CatalogCounts
from imagesvc.web.wire import Keeper, Wire

__all__ = [
    "ACCESS",
    "CALLER",
    "HEALTH_COUNTS",
    "IDENTIFIER",
    "IIIF",
    "KEEPER",
    "LEDGER",
    "METER",
    "METRICS",
    "RATE_HEADERS",
    "REQUEST_DENIED",
    "REQUEST_ID",
    "SERVICES",
    "WARM_UP",
    "WIRE",
]

SERVICES = web.AppKey("services", Services)
ACCESS = web.AppKey("access", AccessState)
IDENTIFIER = web.AppKey("identifier", Identifier)
METRICS = web.AppKey("metrics", Metrics)
IIIF = web.AppKey("iiif", IiifRuntime)
HEALTH_COUNTS = web.AppKey("health_counts", CatalogCounts)
WARM_UP = web.AppKey("warm_up", asyncio.Task)  # a serving process's search warm-up (readiness waits for it)

REQUEST_ID = web.RequestKey("request_id", str)
# a denial (request limit, bad key) that /mcp reports in each tool call's result
REQUEST_DENIED = web.RequestKey("request_denied", ImagesvcError)
CALLER = web.RequestKey("caller", Caller)
METER = web.RequestKey("meter", Meter)
RATE_HEADERS = web.RequestKey("rate_headers", dict)
# a metered delivery being sent: its reservations, the connection's positions, the task that settles them by it
LEDGER = web.RequestKey("ledger", Ledger)
WIRE = web.RequestKey("wire", Wire)
KEEPER = web.RequestKey("keeper", Keeper)
