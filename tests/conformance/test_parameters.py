"""Every route takes exactly the parameters it declares: an unknown or misspelt one is a 400 in the JSON error shape
that names it, suggests the closest accepted name and lists the accepted ones; limits are the spec's (§8)."""

from __future__ import annotations

import re

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from imagesvc.web.params import ANY, query_schema
from imagesvc.web.routes import ROUTES, mounted
from tests.conformance.doors import Doors

BOOK = "demo-speculum-fornacum"
LIBRARY_PRESENT = any(route.path == "/books/library" for route in ROUTES)


async def _samples(doors: Doors) -> dict[str, str]:
    """A real value for every path parameter of the route table, taken from the demo library through the API."""
    book = (await doors.rest(f"/api/books/{BOOK}")).body
    illustration = (await doors.rest(f"/api/books/{BOOK}/images", {"limit": "1"})).body["items"][0]["id"]
    slug = (await doors.rest("/api/gallery/collections")).body["items"][0]["slug"]
    return {
        "book_id": BOOK,
        "slug": slug,
        "id": illustration,
        "store": "gallery",
        "identifier": f"{book['id']}-1",
        "region": "full",
        "size": "max",
        "rotation": "0",
        "quality_format": "default.jpg",
    }


async def test_an_unknown_parameter_on_every_route_is_a_400_naming_it(doors: Doors) -> None:
    samples = await _samples(doors)
    checked, ignoring = [], []
    for method, template, handler in mounted("/api"):
        if query_schema(handler) is ANY:  # static file hosts ignore query strings, as a CDN would
            ignoring.append(template)
            continue
        path = re.sub(r"\{(\w+)(:[^}]*)?\}", lambda m: samples[m.group(1)], template)
        answer = await doors.rest(path, {"bogus_param": "1"}, method=method)
        assert answer.status == 400, (method, path, answer.body)
        body = answer.body
        if isinstance(body, str):  # a page for people: the same 400, rendered as HTML
            assert answer.headers["Content-Type"].startswith("text/html") and "bogus_param" in body, path
        else:
            assert body["error"] == "invalid_request" and body["parameter"] == "bogus_param", (path, body)
            assert "'bogus_param'" in body["message"] and body["recovery"]
        checked.append((method, template))
    assert sorted(ignoring) == ["/img/{path:.+}", "/static/{path:.+}", "/viewer/{path:.+}"]
    assert len(checked) == len(ROUTES) - len(ignoring)


@pytest.mark.parametrize(
    ("path", "query", "suggestion", "accepted"),
    [
        ("/api/books", {"limt": "5"}, "limit", "limit"),
        (f"/api/books/{BOOK}/quote", {"page": "2", "include_orignal": "false"}, "include_original", "include_context"),
        (f"/api/books/{BOOK}/text", {"frm": "3"}, "from", "format"),
        ("/api/gallery", {"maxperbook": "5"}, "maxPerBook", "year_from"),
        ("/api/gallery", {"querry": "plant"}, "query", "book_id"),
        ("/api/image", {"book_id": BOOK, "page": "1", "teir": "thumb"}, "tier", "clean"),
        ("/api/dataset/v1/usage", {"day": "3"}, "days", "days"),
    ],
)
async def test_a_misspelt_parameter_gets_the_closest_name_and_the_accepted_ones(
    doors: Doors, path: str, query: dict[str, str], suggestion: str, accepted: str
) -> None:
    answer = await doors.rest(path, query)
    wrong = list(query)[-1]  # the misspelt name comes last
    assert answer.status == 400, answer.body
    assert answer.body["parameter"] == wrong
    assert answer.body["did_you_mean"] == suggestion
    assert f"Did you mean {suggestion!r}?" in answer.body["message"]
    assert accepted in answer.body["accepted"]


async def test_a_path_parameter_cannot_also_come_in_the_query(doors: Doors) -> None:
    answer = await doors.rest(f"/api/books/{BOOK}/quote", {"page": "1", "book_id": "demo-gart-der-kreuter"})
    assert answer.status == 400 and answer.body["parameter"] == "book_id"


async def test_types_arrays_and_repeats_follow_the_schema(doors: Doors) -> None:
    """Strings become the schema's type; a scalar given twice is refused; booleans read true/false/1/0."""
    twice = await doors.rest("/api/books", [("limit", "1"), ("limit", "2")])
    assert twice.status == 400 and twice.body["parameter"] == "limit"
    for spelled in ("false", "0", "FALSE"):
        quote = await doors.rest(f"/api/books/{BOOK}/quote", {"page": "2", "include_original": spelled})
        assert quote.ok and quote.body["quote"].get("original") is None, spelled
    bad = await doors.rest(f"/api/books/{BOOK}/quote", {"page": "2", "include_original": "maybe"})
    assert bad.status == 400 and bad.body["parameter"] == "include_original"
    empty = await doors.rest("/api/gallery", {"query": "", "limit": "5"})  # an empty form field counts as absent
    assert empty.ok and empty.body["limit"] == 5


async def test_rest_ignores_no_filter(doors: Doors) -> None:
    """A filter REST accepts is applied, never dropped: /gallery?book_id= narrows the gallery to that book."""
    hex_id = (await doors.rest(f"/api/books/{BOOK}")).body["id"]
    whole = (await doors.rest("/api/gallery", {"maxPerBook": "1000", "limit": "50"})).body
    narrowed = (await doors.rest("/api/gallery", {"book_id": BOOK, "maxPerBook": "1000", "limit": "50"})).body
    assert {i["book_id"] for i in narrowed["items"]} == {hex_id} != {i["book_id"] for i in whole["items"]}


@pytest.mark.skipif(not LIBRARY_PRESENT, reason="route not present: GET /books/library is not in the route table yet")
async def test_books_library_limit_is_at_most_200_and_every_answer_has_a_total(doors: Doors) -> None:
    """/books/library: limit at most 200; total returned in every response (spec §4.2, §8)."""
    ok = await doors.rest("/api/books/library", {"limit": "200"})
    assert ok.status == 200 and isinstance(ok.body["total"], int)
    too_many = await doors.rest("/api/books/library", {"limit": "201"})
    assert too_many.status == 400 and too_many.body["parameter"] == "limit"
    assert isinstance((await doors.rest("/api/books/library")).body["total"], int)


async def test_a_query_on_the_mcp_endpoint_is_refused_too(server: TestServer, doors: Doors) -> None:
    answer = await doors.rest("/api/mcp", {"session": "1"}, method="POST")
    assert answer.status == 400 and answer.body["parameter"] == "session"


async def test_image_and_iiif_take_an_upper_case_hex_id(doors: Doors) -> None:
    hex_id = (await doors.rest(f"/api/books/{BOOK}")).body["id"]
    for book in (hex_id, hex_id.upper()):
        image = await doors.rest("/api/image", {"book_id": book, "page": "1", "tier": "thumb"})
        assert image.status == 200 and image.headers["Content-Type"] == "image/jpeg", image.body
        info = await doors.rest(f"/iiif/3/{book}-1/info.json")
        assert info.status == 200 and info.body["width"] > 0, info.body


def test_no_path_but_the_usage_meter_carries_a_version() -> None:
    """Spec: the usage endpoint's path carries ``v1`` (/dataset/v1/usage); no other path carries a version."""
    versioned = [r.path for r in ROUTES if re.search(r"/v\d+(/|$)", r.path)]
    assert versioned == ["/dataset/v1/usage"]


@pytest.mark.parametrize("written", ["1_0", "١٠", "１０", "nan", "inf", "0x0a"])
async def test_a_query_string_number_is_written_in_ascii_digits(written: str, server: TestServer) -> None:
    """Python would read each of these as a number; JSON (MCP, request bodies) would not, so no door does: the same
    argument written as a JSON-number-like ASCII string is taken, these are a 400 naming it."""
    async with aiohttp.ClientSession() as http:
        async with http.get(server.make_url("/api/books"), params={"limit": written}) as resp:
            body = await resp.json()
            assert resp.status == 400 and body["error"] == "invalid_request", body
        async with http.get(server.make_url("/api/books"), params={"limit": "1e1"}) as resp:
            assert resp.status == 200 and (await resp.json())["limit"] == 10
