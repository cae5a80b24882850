"""HTML pages for people: the fourth door onto the tool registry, beside REST, MCP and the CLI.

Handlers parse the query, call tools through ``imagesvc.tools.call`` with the request's caller and meter (as REST
does), and render a template; no tool logic lives here or in the templates. Routes are in ``imagesvc.web.routes``.
"""

from __future__ import annotations

from aiohttp import web

from imagesvc.pages import assets, catalogue, illustrations, reading
from imagesvc.pages.assets import VIEWER_READY, viewer_ready
from imagesvc.pages.errors import PAGE_HANDLERS, html_error_middleware
from imagesvc.pages.render import setup_templates

__all__ = ["assets", "catalogue", "html_error_middleware", "illustrations", "reading", "setup_pages"]

PAGE_HANDLERS.update(
    {
        illustrations.home,
        illustrations.by_image,
        illustrations.by_image_form,
        illustrations.illustration,
        illustrations.collections,
        illustrations.collection,
        reading.book,
        catalogue.catalogue,
    }
)


def setup_pages(app: web.Application, settings: object) -> None:
    """Load the page templates into ``app`` and look once for the installed deep-zoom viewer."""
    setup_templates(app)
    app[VIEWER_READY] = viewer_ready(settings)
    app[illustrations.CHOICES] = {}
