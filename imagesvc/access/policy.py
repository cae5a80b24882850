"""Caller classes and their allowances: the one table that budgets, request limits, headers, docs and tests read.

Numbers follow the service spec §8: anonymous 500 pages and 500 images a day and 60 requests an hour; signed in
1,000 / 1,000 / 1,000 an hour; free key 2,000 / 2,000 / 60 a minute; paid tiers uncapped (still metered) with 120 to
1,000 requests a minute by tier. Verified crawlers and user-directed assistant fetches are never limited.

The request limit is the API's (REST, MCP, the CLI). Pages for people (the HTML pages) are not held to it: a person
reading a book turns a page every few seconds, so 60 requests an hour would stop an anonymous reader after 60 pages.
A page view spends what its page delivers from the daily budgets (a reading page: one page of text), and page views
are paced instead: ``PAGE_VIEWS`` a minute per caller (or the class's own API rate a minute, when that is higher),
counted apart from API requests, which no reader reaches and which leaves a script that reads the pages instead of
the API no more than the daily budgets give it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CLASSES",
    "KEY_TIERS",
    "PAGE_VIEWS",
    "PAGE_VIEWS_POOL",
    "REQUESTS_POOL",
    "CallerClass",
    "Pace",
    "caller_class",
    "key_class",
    "key_tier",
]


REQUESTS_POOL = "requests"  # the API's request limit, by the name headers and 429s give it
PAGE_VIEWS_POOL = "page_views"  # the pace of pages for people


@dataclass(frozen=True)
class Pace:
    """A limit on requests: ``quota`` per ``window`` seconds, named ``name`` in headers and errors."""

    name: str
    quota: int
    window: int


@dataclass(frozen=True)
class CallerClass:
    """What one kind of caller may do. ``None`` as a budget or request limit means uncapped."""

    name: str
    label: str
    rank: int  # rising allowance; identity is always an upgrade
    text_per_day: int | None
    images_per_day: int | None
    requests: int | None
    request_window: int  # seconds
    clean_allowed: bool = False
    exempt: bool = False  # never limited (still metered)
    paid: bool = False

    def budget(self, pool: str) -> int | None:
        """The daily budget of ``pool`` (``text`` or ``images``); ``None`` when uncapped."""
        if self.exempt:
            return None
        if pool == "text":
            return self.text_per_day
        if pool == "images":
            return self.images_per_day
        raise ValueError(f"unknown pool {pool!r}; valid: text, images")

    def request_limit(self) -> int | None:
        """Requests allowed per ``request_window``; ``None`` when never limited."""
        return None if self.exempt else self.requests

    def pace(self, people: bool) -> Pace | None:
        """The per-window limit one request counts against: the API's request limit, or for a page for people
        (``people``) the page views a minute; ``None`` when never limited."""
        if self.exempt:
            return None
        if people:  # never stricter than the class's own API rate (a paid key's 1,000 a minute)
            api_per_minute = 0 if self.requests is None else self.requests * _MINUTE // self.request_window
            return Pace(PAGE_VIEWS_POOL, max(PAGE_VIEWS, api_per_minute), _MINUTE)
        return None if self.requests is None else Pace(REQUESTS_POOL, self.requests, self.request_window)

    def describe(self) -> str:
        """One line a person can read, for error messages and docs."""

        def amount(value: int | None) -> str:
            return "uncapped" if value is None else f"{value:,}"

        if self.exempt:
            return f"{self.label}: never limited"
        per = "hour" if self.request_window == 3600 else "minute"
        return (
            f"{self.label}: {amount(self.text_per_day)} pages and {amount(self.images_per_day)} images per day, "
            f"{amount(self.requests)} requests per {per}"
        )


_HOUR = 3600
_MINUTE = 60
PAGE_VIEWS = 60  # page views a minute per caller, any class: one a second held for a minute is not reading

CLASSES: dict[str, CallerClass] = {
    c.name: c
    for c in (
        CallerClass("anonymous", "Anonymous", 0, 500, 500, 60, _HOUR),
        CallerClass("signed_in", "Signed in (free)", 1, 1_000, 1_000, 1_000, _HOUR),
        CallerClass("key:free", "Free API key", 2, 2_000, 2_000, 60, _MINUTE),
        CallerClass("key:language", "Paid key, language tier", 3, None, None, 120, _MINUTE, paid=True),
        CallerClass("key:domain", "Paid key, domain tier", 4, None, None, 300, _MINUTE, paid=True),
        CallerClass("key:full", "Paid key, full tier", 5, None, None, 600, _MINUTE, clean_allowed=True, paid=True),
        CallerClass(
            "key:enterprise", "Paid key, enterprise tier", 6, None, None, 1_000, _MINUTE, clean_allowed=True, paid=True
        ),
        CallerClass("crawler", "Verified search crawler", 10, None, None, None, _MINUTE, exempt=True),
        CallerClass("assistant", "User-directed assistant fetch", 10, None, None, None, _MINUTE, exempt=True),
    )
}

# The tiers an API key may have: one per ``key:`` class above, in that order (the one list every door checks).
KEY_TIERS: tuple[str, ...] = tuple(name.removeprefix("key:") for name in CLASSES if name.startswith("key:"))


def key_tier(name: str) -> str:
    """``name`` when it is a key tier; ``ValueError`` naming the valid ones otherwise (exact: no case folding)."""
    if name not in KEY_TIERS:
        raise ValueError(f"unknown key tier {name!r}; valid: {', '.join(KEY_TIERS)}")
    return name


def caller_class(name: str) -> CallerClass:
    """The class named ``name``; ``KeyError`` naming the valid classes otherwise."""
    try:
        return CLASSES[name]
    except KeyError:
        raise KeyError(f"unknown caller class {name!r}; valid: {', '.join(CLASSES)}") from None


def key_class(tier: str) -> CallerClass:
    """The class of an API key of ``tier`` (one of ``KEY_TIERS``)."""
    return caller_class(f"key:{tier}")
