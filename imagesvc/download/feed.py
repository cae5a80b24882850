"""The change feed as a harvester reads it: every activity after the bag's point, in the order the server logged
them.

Each activity carries ``seq``, the change log's sequence number: strictly increasing in commit order, never shared,
so "after my point" is exact (``endTime`` is whole seconds and two changes can share one). The walk reads the
collection, then pages from ``last`` back through lower page numbers until a page starts at or before the point.
Page links are followed by their ``page`` number on the origin this client was given, never to the host a link
names; a page number must fall below the one before (a feed that loops ends the walk with an error).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from imagesvc.download.net import Http, Refused

__all__ = ["Activity", "since"]

FEED = "/dataset/changes"


@dataclass(frozen=True)
class Activity:
    seq: int
    kind: str  # Create, Update or Delete
    slug: str | None  # from the activity's archive link (seeAlso), None when it names none


def _page_number(ref: Any) -> int:
    try:
        number = int(parse_qs(urlsplit(str(ref["id"])).query)["page"][0])
    except (KeyError, IndexError, TypeError, ValueError):
        raise Refused(f"the change feed links a page this client cannot read: {str(ref)[:200]}") from None
    if number < 1:
        raise Refused("the change feed links a page numbered below 1")
    return number


def _activity(item: Any) -> Activity:
    if (
        not isinstance(item, dict)
        or type(item.get("seq")) is not int
        or item.get("type")
        not in (
            "Create",
            "Update",
            "Delete",
        )
    ):
        raise Refused(f"the change feed holds an activity without a sequence number or known type: {str(item)[:200]}")
    slug = None
    for link in (item.get("object") or {}).get("seeAlso") or []:
        path = urlsplit(str(link.get("id", "")) if isinstance(link, dict) else "").path
        if path.endswith("/archive") and "/books/" in path:
            slug = path.rsplit("/books/", 1)[1].removesuffix("/archive")
    return Activity(item["seq"], item["type"], slug)


async def since(http: Http, point: int | None) -> tuple[int, list[Activity]]:
    """``(the feed's newest seq, activities after point oldest first)``; with no point, the newest seq and none."""
    collection = await http.json(FEED)
    if not collection.get("totalItems"):
        return (point or 0), []
    page = _page_number(collection.get("last"))
    found: list[Activity] = []
    newest: int | None = None
    while True:
        body = await http.json(FEED, {"page": page})
        items = [_activity(item) for item in body.get("orderedItems") or []]
        if items:
            newest = max(newest or 0, items[-1].seq)
        found += [a for a in items if point is not None and a.seq > point]
        if point is None or not items or items[0].seq <= point or "prev" not in body:
            break
        previous = _page_number(body["prev"])
        if previous >= page:
            raise Refused("the change feed's prev link does not go back: the walk would never end")
        page = previous
    found.sort(key=lambda a: a.seq)
    return (newest if newest is not None else (point or 0)), found
