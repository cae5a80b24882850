"""Search by image: its declared arguments on every body form, and the attacks on its upload kept as tests (huge,
compressed, many-part, boundary-less, deeply nested, trickled bodies; floods from one caller; whole-number floats)."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.test_utils import TestClient, TestServer

from imagesvc.app import build_app
from tests.http.conftest import MakeClient
from tests.http.test_gallery import _jpeg, _page, _printings
from tests.library import settings_for

ROUTE = "/api/gallery/search-by-image"


def _crop(demo_library: dict[str, Any]) -> bytes:
    """The middle 60% of one printing of the demo's shared woodblock, as a JPEG."""
    root, printings = _printings(demo_library)
    first = printings[0]
    x0, y0, x1, y1 = first["box"]
    w, h = x1 - x0, y1 - y0
    return _jpeg(_page(root, first).crop((x0 + w // 5, y0 + h // 5, x1 - w // 5, y1 - h // 5)))


async def _error(response: aiohttp.ClientResponse, status: int) -> dict[str, Any]:
    body = await response.json()
    assert response.status == status, body
    assert body["message"] and body["recovery"], body
    return body


# -- the contract -------------------------------------------------------------------------------------------------


async def test_limit_and_book_id_are_read_from_the_query_string_of_a_raw_upload(
    make_client: MakeClient, demo_library: dict[str, Any]
) -> None:
    client = await make_client(search_wait=600)
    picture = _crop(demo_library)
    raw = {"Content-Type": "image/jpeg"}
    response = await client.post(ROUTE, params={"limit": "1"}, data=picture, headers=raw)
    body = await response.json()
    assert response.status == 200, body
    assert len(body["same_block"]) == 1  # three printings match; limit=1 is applied
    unknown_book = await _error(
        await client.post(ROUTE, params={"book_id": "no-such-book"}, data=picture, headers=raw), 404
    )
    assert unknown_book["error"] == "not_found"
    zero = await _error(await client.post(ROUTE, params={"limit": "0"}, data=picture, headers=raw), 400)
    assert zero["parameter"] == "limit" and "at least 1" in zero["message"]
    other = await _error(await client.post(ROUTE, params={"shape": "round"}, data=picture, headers=raw), 400)
    assert other["accepted"] == ["book_id", "limit"]
    twice = await _error(
        await client.post(ROUTE, params={"limit": "2"}, json={"image": base64.b64encode(picture).decode(), "limit": 2}),
        400,
    )
    assert "both" in twice["message"]


async def test_a_whole_number_float_limit_in_json_is_that_number(
    make_client: MakeClient, demo_library: dict[str, Any]
) -> None:
    client = await make_client(search_wait=600)
    body = {"image": base64.b64encode(_crop(demo_library)).decode(), "limit": 2.0}
    response = await client.post(ROUTE, json=body)
    found = await response.json()
    assert response.status == 200, found
    assert len(found["same_block"]) == 2
    half = await _error(await client.post(ROUTE, json=body | {"limit": 2.5}), 400)
    assert half["parameter"] == "limit" and "whole number" in half["message"]


async def test_form_fields_are_the_tools_arguments(make_client: MakeClient, demo_library: dict[str, Any]) -> None:
    client = await make_client()
    form = aiohttp.FormData()
    form.add_field("image", _crop(demo_library), filename="crop.jpg", content_type="image/jpeg")
    form.add_field("book_id", "no-such-book")
    assert (await _error(await client.post(ROUTE, data=form), 404))["error"] == "not_found"


async def test_openapi_and_llms_txt_declare_every_body_form(client: TestClient) -> None:
    document = await (await client.get("/api/openapi.json")).json()
    operation = document["paths"][ROUTE]["post"]
    assert {p["name"] for p in operation["parameters"] if p["in"] == "query"} == {"book_id", "limit"}
    content = operation["requestBody"]["content"]
    assert set(content) == {"image/*", "multipart/form-data", "application/json"}
    assert set(content["multipart/form-data"]["schema"]["properties"]) == {"image", "book_id", "limit"}
    assert content["application/json"]["schema"]["required"] == ["image"]
    page = document["paths"]["/search-by-image"]["post"]["requestBody"]["content"]
    assert set(page["multipart/form-data"]["schema"]["properties"]) == {"image", "book_id", "limit"}
    text = await (await client.get("/llms.txt")).text()
    section = text[text.index(f"- POST {ROUTE}") :].split("\n- ", 1)[0]
    assert "Query parameters: book_id (string), limit (integer)" in section
    assert "Body multipart/form-data: image (string, required), book_id (string), limit (integer)." in section


# -- 500s from input ----------------------------------------------------------------------------------------------


async def test_a_json_body_nested_3000_deep_is_a_400(client: TestClient) -> None:
    deep = '{"image": "aGk=", "book_id": ' + "[" * 3000 + "]" * 3000 + "}"
    body = await _error(await client.post(ROUTE, data=deep, headers={"Content-Type": "application/json"}), 400)
    assert "nests" in body["message"]
    shallow = '{"image": "aGk=", "book_id": ' + "[" * 100 + "]" * 100 + "}"  # parses, still too deep
    assert (
        "nests"
        in (await _error(await client.post(ROUTE, data=shallow, headers={"Content-Type": "application/json"}), 400))[
            "message"
        ]
    )


async def test_multipart_without_a_boundary_is_a_400_in_json_and_an_html_page(client: TestClient) -> None:
    headers = {"Content-Type": "multipart/form-data"}
    body = await _error(await client.post(ROUTE, data=b"--x\r\n\r\n", headers=headers), 400)
    assert "boundary" in body["message"]
    page = await client.post("/search-by-image", data=b"--x\r\n\r\n", headers=headers | {"Accept": "text/html"})
    assert page.status == 400 and page.content_type == "text/html"
    assert "boundary" in await page.text()


async def test_whole_number_floats_are_integers_over_mcp_and_in_query_strings(client: TestClient) -> None:
    book_id = (await (await client.get("/api/books")).json())["items"][0]["id"]
    calls = [
        ("search_images", {"limit": 5.0, "maxPerBook": 2.0, "offset": 0.0, "year_from": 1400.0}),
        ("get_book_images", {"book_id": book_id, "limit": 2.0}),
        ("search_images_by_image", {"image": "aGk=", "limit": 1.5}),
    ]
    for n, (name, arguments) in enumerate(calls):
        message = {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
        result = (await (await client.post("/api/mcp", json=message)).json())["result"]
        text = result["content"][0]["text"]
        if name == "search_images_by_image":
            assert result["isError"] and "invalid_request" in text and "whole number" in text, text
        else:
            assert not result["isError"], text
    gallery = await client.get("/api/gallery", params={"limit": "5.0"})
    assert gallery.status == 200 and (await gallery.json())["limit"] == 5
    assert (await _error(await client.get("/api/gallery", params={"limit": "5.5"}), 400))["parameter"] == "limit"


# -- bounded bodies ---------------------------------------------------------------------------------------------


async def test_a_form_of_many_parts_is_refused_after_a_few(client: TestClient) -> None:
    boundary = "b0undary"
    part = f'--{boundary}\r\nContent-Disposition: form-data; name="f{{}}"\r\n\r\nx\r\n'
    body = "".join(part.format(n) for n in range(20_000)) + f"--{boundary}--\r\n"

    async def chunks() -> Any:
        data = body.encode()
        for start in range(0, len(data), 65536):
            yield data[start : start + 65536]

    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    for route in (ROUTE, "/search-by-image"):
        response = await client.post(route, data=chunks(), headers=headers)
        assert response.status == 400
        assert "more than 8 parts" in await response.text()


async def test_compressed_bodies_are_refused_unread(client: TestClient) -> None:
    inflated = json.dumps({"image": base64.b64encode(b"x" * 1000).decode(), "book_id": "a" * 5_000_000})
    packed = gzip.compress(inflated.encode())
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    body = await _error(await client.post(ROUTE, data=packed, headers=headers), 415)
    assert body["error"] == "unsupported_media_type" and "gzip" in body["message"]
    boundary = "zz"
    form = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="image"; filename="a.jpg"\r\n'
            f"Content-Encoding: gzip\r\n\r\n"
        ).encode()
        + gzip.compress(b"\0" * 1_000_000)
        + f"\r\n--{boundary}--\r\n".encode()
    )
    page = await client.post(
        "/search-by-image",
        data=form,
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}", "Accept": "text/html"},
    )
    assert page.status == 415 and "gzip" in await page.text()


async def test_a_body_trickled_in_is_cut_off_with_a_408(data_dir: Path) -> None:
    server = TestServer(build_app(settings_for(data_dir, body_read_timeout=1)), host="127.0.0.1")
    await server.start_server()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(
            f"POST {ROUTE} HTTP/1.1\r\nHost: x\r\nContent-Type: image/jpeg\r\nContent-Length: 5000\r\n\r\n".encode()
        )
        started = time.monotonic()
        status = b""

        async def trickle() -> None:
            for _ in range(50):
                writer.write(b"\xff")
                await writer.drain()
                await asyncio.sleep(0.2)

        dripping = asyncio.ensure_future(trickle())
        try:
            status = await asyncio.wait_for(reader.readline(), 5)
        finally:
            dripping.cancel()
            writer.close()
        assert status.startswith(b"HTTP/1.1 408"), status
        assert time.monotonic() - started < 4
    finally:
        await server.close()


# -- fair use of CPU -----------------------------------------------------------------------------------------------


async def test_one_caller_runs_one_search_at_a_time_and_a_full_queue_is_a_503(
    make_client: MakeClient, demo_library: dict[str, Any]
) -> None:
    picture = _crop(demo_library)
    raw = {"Content-Type": "image/jpeg"}
    client = await make_client(search_wait=600)

    async def search(headers: dict[str, str]) -> aiohttp.ClientResponse:
        response = await client.post(ROUTE, data=picture, headers=raw | headers)
        await response.read()
        return response

    first, second = await asyncio.gather(search({}), search({}))
    statuses = sorted([first.status, second.status])
    assert statuses == [200, 429], statuses
    refused = first if first.status == 429 else second
    assert int(refused.headers["Retry-After"]) > 0
    assert (await refused.json())["error"] == "rate_limited"

    busy = await make_client(
        search_wait=600, image_search_threads=1, image_search_queue=0, trusted_proxies=("127.0.0.1",)
    )
    answers = await asyncio.gather(
        *(busy.post(ROUTE, data=picture, headers=raw | {"X-Forwarded-For": f"203.0.113.{n}"}) for n in range(2))
    )
    statuses = sorted(a.status for a in answers)
    assert statuses == [200, 503], statuses
    refused = next(a for a in answers if a.status == 503)
    assert int(refused.headers["Retry-After"]) > 0


async def test_slivers_and_specks_of_pictures_answer_with_no_match_not_a_500(make_client: MakeClient) -> None:
    """Found by the schemathesis test: a picture too small for the feature detector's pyramid crashed the matcher."""
    from PIL import Image

    client = await make_client(search_wait=600)
    for size in ((1, 1), (3, 900), (900, 5), (40, 40)):
        response = await client.post(
            ROUTE, data=_jpeg(Image.new("RGB", size, "white")), headers={"Content-Type": "image/jpeg"}
        )
        body = await response.json()
        assert response.status in (200, 400), body  # a 400 may say the picture is too small; never a 500
        if response.status == 200:
            assert body["same_block"] == [], (size, body)
