"""Jinja2 templates for the pages (aiohttp-jinja2), the filters they use, and the headers every page carries."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp_jinja2
import jinja2
from aiohttp import web

from imagesvc.web.app_keys import SERVICES

__all__ = ["TEMPLATES", "page_headers", "render", "setup_templates"]

TEMPLATES = Path(__file__).with_name("templates")

# Language names in the catalog -> BCP 47 tags for lang="" (screen readers pick their voice from it).
_LANG = {"hebrew": "he", "latin": "la", "german": "de", "french": "fr", "english": "en", "greek": "grc", "arabic": "ar"}


def lang_tag(language: str | None) -> str:
    return _LANG.get((language or "").strip().lower(), "und")


def local(url: str | None) -> str:
    """A site URL (citation URLs are absolute on ``site_url``) as a path on this site, so links stay on this host."""
    if not url:
        return ""
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def segment(value: Any) -> str:
    """A value as one URL path segment (or query value): escaped, but ids keep their readable ``:``."""
    return quote(str(value), safe=":")


def wait(seconds: Any) -> str:
    """A Retry-After value for a person: ``45 seconds``, ``about 17 minutes``, ``about 3 hours``."""
    n = int(seconds)
    if n < 90:
        return f"{n} second{'s' if n != 1 else ''}"
    if n < 90 * 60:
        return f"about {round(n / 60)} minutes"
    return f"about {round(n / 3600)} hours"


def score(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, int | float) else ""


def setup_templates(app: web.Application) -> None:
    """Load the templates once; autoescape is on for every template (titles and descriptions come from manifests)."""
    env = aiohttp_jinja2.setup(
        app,
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=jinja2.select_autoescape(default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(local=local, score=score, lang_tag=lang_tag, segment=segment, wait=wait)


def page_headers(request: web.Request) -> dict[str, str]:
    """Headers of every HTML page. The CSP allows scripts from this site only and images from this site and the image
    host, so a page can load nothing else (and never an originating institution's image)."""
    image_base = request.app[SERVICES].settings.image_base
    host = urlsplit(image_base)
    images = f"{host.scheme}://{host.netloc}" if host.netloc else ""
    csp = (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        f"img-src 'self' data: blob: {images}; connect-src 'self'; object-src 'none'; base-uri 'self'; "
        "form-action 'self'; frame-ancestors 'self'"
    )
    return {
        "Content-Security-Policy": csp,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "strict-origin-when-cross-origin",
        "Vary": "Authorization, Cookie",
    }


def render(
    request: web.Request,
    template: str,
    context: dict[str, Any],
    *,
    status: int = 200,
    headers: dict[str, str] | None = None,
) -> web.Response:
    """Render ``template`` with ``context`` as an HTML page with the page headers."""
    context = {"site_name": request.app[SERVICES].settings.site_name, "request": request, **context}
    response = aiohttp_jinja2.render_template(template, request, context, status=status)
    response.headers.update(page_headers(request))
    response.headers.update(headers or {})
    return response
