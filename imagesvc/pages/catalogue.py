"""``/catalogue``: the books for people to browse, filtered by language, library, collection, century and whether
they are illustrated, each filter offered with how many books choosing it gives (the ``list_books`` tool's facets),
in title order, a page at a time by keyset (``next_cursor``), so the last page costs what the first does."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from imagesvc import tools
from imagesvc.pages.render import render
from imagesvc.web.app_keys import SERVICES
from imagesvc.web.params import accepts
from imagesvc.web.rest import tool_call

__all__ = ["PER_PAGE", "catalogue"]

PER_PAGE = 24
_TEXT = {"type": "string", "minLength": 1, "maxLength": 200}
FILTERS = ("language", "library", "collection", "century", "has_images", "q")


@accepts(
    {
        "properties": {
            "language": {**_TEXT, "description": "Edition language."},
            "library": {**_TEXT, "description": "Contributing library."},
            "collection": {**_TEXT, "description": "Book collection slug."},
            "century": {"type": "integer", "minimum": 0, "maximum": 2100, "description": "e.g. 1500: 1500-1599."},
            "has_images": {"type": "boolean", "description": "Only illustrated books (or only the others)."},
            "q": {**_TEXT, "description": "Words of a title or an author."},
            "cursor": {**_TEXT, "description": "Where the previous page ended (its next link)."},
        }
    }
)
async def catalogue(request: web.Request, arguments: dict[str, Any]) -> web.Response:
    """``GET /catalogue``: one page of books with the filters and their counts."""
    chosen = {k: v for k, v in arguments.items() if k in FILTERS}
    args: dict[str, Any] = {"sort": "title-asc", "limit": PER_PAGE, "facets": True}
    for key in ("language", "library", "collection", "has_images"):
        if key in chosen:
            args[key] = chosen[key]
    if "century" in chosen:
        args |= {"year_from": chosen["century"], "year_to": chosen["century"] + 99}
    if "q" in chosen:
        args["search"] = chosen["q"]
    if "cursor" in arguments:
        args["cursor"] = arguments["cursor"]
    result = await tools.call(request.app[SERVICES], "list_books", args, tool_call(request))
    facets = {name: _choices(name, found, chosen) for name, found in result["facets"].items()}
    next_link = None
    if result["next_cursor"]:
        next_link = "/catalogue?" + urlencode({**chosen, "cursor": result["next_cursor"]})
    context = {
        "title": "Books",
        "books": result["items"],
        "total": result["total"],
        "facets": facets,
        "chosen": chosen,
        "q": chosen.get("q", ""),
        "next_link": next_link,
        "first_link": "/catalogue?" + urlencode(chosen) if "cursor" in arguments else None,
    }
    return render(request, "catalogue.html", context)


def _label(name: str, value: Any) -> str:
    if name == "century":
        return f"{value}s"
    if name == "has_images":
        return "Illustrated" if value else "Not illustrated"
    return str(value)


def _choices(name: str, found: list[dict[str, Any]], chosen: dict[str, Any]) -> list[dict[str, Any]]:
    """Each value of facet ``name`` as a link that sets it (or clears it when it is the one chosen), with its count."""
    out = []
    for entry in found:
        value = bool(entry["value"]) if name == "has_images" else entry["value"]
        selected = chosen.get(name) == value
        query = {k: v for k, v in chosen.items() if k != name} | ({} if selected else {name: value})
        query = {k: str(v).lower() if isinstance(v, bool) else v for k, v in query.items()}
        out.append(
            {
                "label": _label(name, value),
                "count": entry["count"],
                "selected": selected,
                "href": "/catalogue" + ("?" + urlencode(query) if query else ""),
            }
        )
    return out
