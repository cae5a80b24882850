"""Cost of reading a request's parameters through its schema, per request, beside the hand-written parsing it
replaced (``int()``/``str`` per parameter) measured alongside: the fast path, and jsonschema for the same arguments.

Run: ``.venv/bin/python benchmarks/params.py [--n 20000]``. Prints a Markdown table of microseconds per call.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from imagesvc.surface.arguments import _validator, validate, with_defaults
from imagesvc.tools import load_all
from imagesvc.web.images import IMAGE_PARAMS

__all__ = ["main"]


def _per_call(func: Callable[[], Any], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        func()
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=20000)
    n = parser.parse_args().n
    image = {"type": "object", "additionalProperties": False, **IMAGE_PARAMS}
    gallery = load_all()["search_images"].input_schema
    cases = {
        "/image (book_id, page, tier)": (image, {"book_id": "demo-speculum-fornacum", "page": 1, "tier": "thumb"}),
        "/gallery (query, type, year range, maxPerBook)": (
            gallery,
            {"query": "plant", "type": "woodcut", "year_from": 1500, "year_to": 1700, "maxPerBook": 5},
        ),
    }
    raw = {"book_id": "demo-speculum-fornacum", "page": "1", "tier": "thumb"}

    def by_hand() -> None:  # what the old handlers did: one lookup and conversion per parameter
        int(raw["page"])
        assert raw["tier"] in ("full", "display", "thumb")
        str(raw["book_id"])

    print("| arguments | hand-written parse (µs) | schema, fast path (µs) | jsonschema alone (µs) |")
    print("|---|---|---|---|")
    for label, (schema, arguments) in cases.items():
        fast = _per_call(lambda s=schema, a=arguments: with_defaults(s, a) if validate("x", s, a) is None else 0, n)
        full = _per_call(lambda s=schema, a=arguments: list(_validator(s).iter_errors(a)), n)
        print(f"| {label} | {_per_call(by_hand, n):.1f} | {fast:.1f} | {full:.1f} |")


if __name__ == "__main__":
    main()
