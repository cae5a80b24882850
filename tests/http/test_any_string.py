"""No string makes a 500, on either catalog backend, at any door that takes text.

The doors are enumerated from the route table (every path parameter and every text query parameter of every GET
route, pages included), the tool registry (every text argument of every tool, through ``POST /api/mcp``) and the
bodies that carry text (the JSON body and the forms of search by image). Whatever string one of them is given, the
answer is a normal one or an error under 500 in the one error shape: JSON ``{error, message, recovery}`` on REST and
IIIF, an ``isError`` tool result on MCP, an HTML page for a person on the pages.

The explicit cases are strings that made 500s: the ALA-LC apostrophes of romanised Arabic and Hebrew names on
PostgreSQL (``unaccent`` turned them into quotes after the words were quoted), NUL in an id (PostgreSQL takes no NUL in
text), and a lone surrogate inside a base64 JSON cursor (no UTF-8 for either database). NUL and lone surrogates are
refused as 400 ``invalid_request`` naming the parameter, wherever they enter.
"""

from __future__ import annotations

import base64
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from imagesvc import tools
from imagesvc.pages.errors import PAGE_HANDLERS
from imagesvc.surface.arguments import not_text
from imagesvc.web.params import query_schema
from imagesvc.web.routes import API, ROUTES, Route
from tests.http.live import Answer, Live, library_settings, postgres_library, serve
from tests.library import copy_library

BOOK = "demo-sefer-maarekhet-ha-kokhavim"
COLLECTION = "demo-highlights"
APOSTROPHES = ["Qurʼan", "ʻAli", "Saʼdi", "ŉ", "Qurʼan ʻAli Saʼdi", '"Qurʼan"']
NUL = ["\x00", "a\x00b", f"{BOOK}\x00"]
SURROGATES = ["\ud800", "a\udfffb"]


def cursor_of(*parts: Any) -> str:
    """A cursor as the dataset listing writes one (base64url of a JSON array), of any content."""
    return base64.urlsafe_b64encode(json.dumps(list(parts)).encode()).decode().rstrip("=")


SURROGATE_CURSORS = [cursor_of("\ud800", 1), cursor_of(BOOK + "\udc00", 3), cursor_of("\x00", 1)]


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def served(request: Any, demo_library: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """The real app over the demo library, its catalog in SQLite or in PostgreSQL (ingested once per module)."""
    data = tmp_path_factory.mktemp(f"any-string-{request.param}")
    if request.param == "sqlite":
        settings = library_settings(copy_library(demo_library["data"], data), text_model="off")
    else:
        server = request.getfixturevalue("postgres_server")
        url = postgres_library(server, demo_library["manifest"], data)
        settings = library_settings(data, url, text_model="off")
    with serve(settings, request.param) as app:
        yield app


@pytest.fixture
def live(served: Live) -> Live:
    """The module's app, with a key of this test's own (its request limit is per minute)."""
    return served.fresh()


# ---- the doors ----


@dataclass(frozen=True)
class Door:
    """One place text enters: ``send(live, text)`` puts ``text`` there, everything else valid."""

    name: str
    kind: str  # "rest" (JSON errors), "page" (HTML errors), "mcp" (tool results)
    method: str
    path: str  # the route's path, with {name} for each path parameter
    parameter: str
    where: str  # "path", "query", "mcp", "json", "form"
    path_values: dict[str, str] = field(default_factory=dict)

    def url(self, text: str | None) -> str:
        def fill(match: re.Match[str]) -> str:
            name = match.group(1)
            value = text if (self.where == "path" and name == self.parameter) else self.path_values[name]
            return _escape(value)

        path = re.sub(r"{(\w+)(?::[^}]*)?}", fill, self.path)
        if self.where == "query" and text is not None:
            path += f"?{self.parameter}={_escape(text)}"
        return path

    def send(self, live: Live, text: str) -> Answer:
        if self.where in ("path", "query"):
            accept = {"Accept": "text/html"} if self.kind == "page" else {}
            return live.request(self.method, self.url(text), headers=accept)
        if self.where == "mcp":
            arguments = {**REQUIRED.get(self.name.split(".")[0], {}), self.parameter: text}
            message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
            message["params"] = {"name": self.name.split(".")[0], "arguments": arguments}  # type: ignore[assignment]
            return live.request("POST", "/api/mcp", json.dumps(message).encode(), {"Content-Type": "application/json"})
        if self.where == "json":
            body = json.dumps({"image": base64.b64encode(PICTURE).decode(), self.parameter: text}).encode()
            return live.request("POST", self.url(None), body, {"Content-Type": "application/json"})
        body, ctype = _multipart({self.parameter: text}, PICTURE)
        return live.request("POST", self.url(None), body, {"Content-Type": ctype, "Accept": "text/html"})


def _escape(text: str) -> str:
    """Percent-encoded UTF-8; a lone surrogate as the bytes a careless encoder writes for it (no UTF-8 at all)."""
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


def _picture() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), (120, 80, 40)).save(out, "JPEG")
    return out.getvalue()


PICTURE = _picture()


def _multipart(fields: dict[str, str], image: bytes) -> tuple[bytes, str]:
    boundary = "any-string-boundary"
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
        + value.encode("utf-8", "surrogatepass")
        + b"\r\n"
        for name, value in fields.items()
    ]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="image"; filename="a.jpg"\r\n'
        "Content-Type: image/jpeg\r\n\r\n".encode()
        + image
        + b"\r\n"
    )
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


PATH_VALUES = {
    "book_id": BOOK,
    "slug": COLLECTION,
    "id": "x",
    "identifier": f"{BOOK}-1",
    "region": "full",
    "size": "max",
    "rotation": "0",
    "quality_format": "default.jpg",
    "store": "clip",
    "path": "x",
}
# The arguments a tool needs besides the one under test.
REQUIRED: dict[str, dict[str, Any]] = {
    "get_book": {"book_id": BOOK},
    "get_book_archive": {"book_id": BOOK},
    "get_book_images": {"book_id": BOOK},
    "get_book_text": {"book_id": BOOK},
    "get_collection": {"slug": COLLECTION},
    "get_image": {"id": "x"},
    "get_quote": {"book_id": BOOK, "page": 1},
    "get_quotes": {"book_id": BOOK},
    "get_vectors": {"store": "clip"},
    "search_images_by_image": {"image": base64.b64encode(PICTURE).decode()},
    "search_within_book": {"book_id": BOOK, "q": "sun"},
}


def _is_page(route: Route) -> bool:
    """Whether ``route`` is a page for people (its handler, under the parameter checks, is one of PAGE_HANDLERS)."""
    handler: object = route.handler
    while handler is not None:
        if handler in PAGE_HANDLERS:
            return True
        handler = getattr(handler, "__wrapped__", None)
    return False


def _texty(prop: dict[str, Any]) -> bool:
    return prop.get("type") in ("string", None) or (prop.get("type") == "array" and "items" in prop)


def doors() -> list[Door]:
    """Every door that takes text, from the route table and the tool registry."""
    found: list[Door] = []
    for route in ROUTES:
        path = ("/api" if route.mount == API else "") + route.path
        kind = "page" if route.mount != API and _is_page(route) else "rest"
        values = dict(PATH_VALUES, slug=BOOK if route.path.startswith("/book/") else COLLECTION)
        if route.method == "GET":
            for name in re.findall(r"{(\w+)", route.path):
                found.append(Door(f"{route.method} {path} {{{name}}}", kind, "GET", path, name, "path", values))
            schema = query_schema(route.handler) or {}
            for name, prop in schema.get("properties", {}).items():
                if _texty(prop) and name not in re.findall(r"{(\w+)", route.path):
                    found.append(Door(f"{route.method} {path} ?{name}", kind, "GET", path, name, "query", values))
    for name, spec in sorted(tools.load_all().items()):
        for arg, prop in spec.input_schema.get("properties", {}).items():
            if _texty(prop):
                found.append(Door(f"{name}.{arg}", "mcp", "POST", "/api/mcp", arg, "mcp"))
    found.append(
        Door(
            "POST /api/gallery/search-by-image json.book_id",
            "rest",
            "POST",
            "/api/gallery/search-by-image",
            "book_id",
            "json",
        )
    )
    found.append(
        Door(
            "POST /api/gallery/search-by-image form.book_id",
            "rest",
            "POST",
            "/api/gallery/search-by-image",
            "book_id",
            "form",
        )
    )
    found.append(Door("POST /search-by-image form.book_id", "page", "POST", "/search-by-image", "book_id", "form"))
    return found


DOORS = doors()


# ---- what every answer must be ----


def check(door: Door, text: str, answer: Answer) -> dict[str, Any] | None:
    """Assert ``answer`` is no 500 and, when an error, the door's one error shape; the error body (or None)."""
    shown = f"{door.name} <- {text!r}: {answer.status} {answer.text[:300]}"
    assert answer.status < 500, shown
    if door.kind == "mcp":
        reply = answer.json()
        assert answer.status == 200 and reply.get("error", {}).get("code") != -32603, shown
        result = reply.get("result", {})
        if result.get("isError"):
            error = result["structuredContent"]
            assert error["error"] != "internal" and error["message"] and isinstance(error["recovery"], list), shown
            return dict(error)
        return None
    if answer.status < 400:
        return None
    if door.kind == "page":
        assert answer.content_type.startswith("text/html"), shown
        return None
    assert answer.content_type.startswith("application/json"), shown
    error = answer.json()
    assert isinstance(error["error"], str) and error["message"] and isinstance(error["recovery"], list), shown
    assert error["error"] != "internal", shown
    return dict(error)


# ---- the explicit cases: each made a 500 before ----


def _reaches(door: Door, text: str) -> bool:
    """Whether ``text`` can arrive at ``door`` as it is: an HTTP query string reads invalid UTF-8 as U+FFFD."""
    has_surrogate = any("\ud800" <= c <= "\udfff" for c in text)
    return not (has_surrogate and door.where in ("path", "query", "form"))


@pytest.mark.slow
def test_ala_lc_apostrophes_are_searched_at_every_door(live: Live) -> None:
    """``Qurʼan``, ``ʻAli``, ``Saʼdi``: searched like any word on both backends, never a 500."""
    for door in DOORS:
        for text in APOSTROPHES:
            check(door, text, door.send(live, text))


def test_apostrophes_in_every_search_are_answered(live: Live) -> None:
    """On PostgreSQL ``unaccent`` makes U+02BC an apostrophe: the query is folded as the index is, then quoted."""
    for path in ("/api/books?search=", "/api/gallery?query=", "/?query=", "/api/books/library?search="):
        for text in APOSTROPHES:
            answer = live.request("GET", path + quote(text), headers={"Accept": "text/html"})
            assert answer.status == 200, (path, text, answer.text[:300])


def refused(door: Door, text: str, answer: Answer) -> None:
    """``answer`` is the 400 ``invalid_request`` naming the door's parameter (an HTML 400 on a page)."""
    error = check(door, text, answer)
    if door.kind == "page":  # rendered for a person, with the status the API would send
        assert answer.status == 400, (door.name, text, answer.status, answer.text[:300])
        return
    assert error is not None and error["error"] == "invalid_request", (door.name, text, error)
    assert error.get("parameter") == door.parameter, (door.name, text, error)


@pytest.mark.slow
def test_nul_is_a_400_naming_the_parameter_at_every_door(live: Live) -> None:
    """NUL, which no text holds (PostgreSQL refused it with a 500 at 19 doors; SQLite looked it up)."""
    for door in DOORS:
        for text in NUL:
            refused(door, text, door.send(live, text))


@pytest.mark.slow
def test_lone_surrogates_are_a_400_naming_the_parameter_at_every_json_door(live: Live) -> None:
    for door in DOORS:
        for text in SURROGATES:
            if _reaches(door, text):
                refused(door, text, door.send(live, text))


def test_a_cursor_that_decodes_to_nul_or_a_lone_surrogate_is_a_400_naming_it(live: Live) -> None:
    """A base64 JSON cursor carrying ``\\ud800`` or NUL: refused once decoded, on every door and both backends (it
    was a 500 on both)."""
    cursor_doors = [d for d in DOORS if d.parameter == "cursor" and d.where in ("query", "mcp")]
    assert {d.name for d in cursor_doors} >= {"GET /api/dataset/images ?cursor", "list_dataset_images.cursor"}
    for door in cursor_doors:
        for cursor in SURROGATE_CURSORS:
            refused(door, cursor, door.send(live, cursor))


def test_the_json_rpc_envelope_takes_any_string(live: Live) -> None:
    """The strings of the message itself (its id, method, tool name and argument names) holding NUL or a lone
    surrogate, alone and in a batch: a JSON-RPC answer, never a 500. An id that cannot be echoed in a UTF-8 reply (a
    lone surrogate) is refused as an invalid request answered with a null id."""
    headers = {"Content-Type": "application/json"}
    tool = {"name": "get_book", "arguments": {"book_id": BOOK}}
    for text in [*NUL, *SURROGATES]:
        messages = [
            {"jsonrpc": "2.0", "id": text, "method": "tools/list"},
            {"jsonrpc": "2.0", "id": text, "method": "tools/call", "params": tool},
            {"jsonrpc": "2.0", "id": 1, "method": text},
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": text, "arguments": {}}},
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_book", "arguments": {text: 1}}},
        ]
        for body in [*messages, messages]:
            answer = live.request("POST", "/api/mcp", json.dumps(body).encode(), headers)
            assert answer.status in (200, 400), (text, body, answer.status, answer.text[:300])
            replies = answer.json()
            for reply in replies if isinstance(replies, list) else [replies]:
                assert reply["jsonrpc"] == "2.0" and ("error" in reply or "result" in reply), (text, reply)
        refused = live.request("POST", "/api/mcp", json.dumps(messages[0]).encode(), headers).json()
        if not_text(text) is not None:
            assert refused["id"] is None and refused["error"]["code"] == -32600, (text, refused)


def test_every_door_that_takes_text_is_listed() -> None:
    """The enumeration reaches the doors the issue names: searches, ids, cursors, pages, MCP and the forms."""
    names = {d.name for d in DOORS}
    assert {"GET /api/books ?search", "GET /api/gallery ?query", "GET / ?query", "GET /book/{slug} ?q"} <= names
    assert {"GET /api/books/{book_id} {book_id}", "GET /iiif/3/manifest/{book_id} {book_id}"} <= names
    assert {"search_images.query", "list_books.search", "search_within_book.q"} <= names
    assert len(DOORS) > 80


# ---- the property ----

SPECIAL = ["ʼ", "ʻ", "ŉ", "'", '"', "\\", "\x00", ":", "*", "&", "|", "!", "(", ")", "<", ">", "-", "%", " ", "\ud800"]
TEXTS = st.text(st.sampled_from(SPECIAL) | st.characters(exclude_categories=()), max_size=24)
CURSORY = st.builds(cursor_of, TEXTS, st.integers(-1, 2**64)) | TEXTS


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(door=st.sampled_from(DOORS), data=st.data())
@pytest.mark.slow
def test_any_string_at_any_door_is_an_answer_or_an_error_in_the_one_shape(live: Live, door: Door, data: Any) -> None:
    text = data.draw(CURSORY if door.parameter in ("cursor", "after") else TEXTS)
    check(door, text, door.send(live, text))
