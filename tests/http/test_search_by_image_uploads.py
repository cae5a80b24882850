"""Bounds of search by image that hold from the upload on: while one upload of a caller is still arriving, that
caller's further uploads are refused (429, Retry-After) without their bodies being read; a picture whose size cannot
be read from its first bytes is priced at the whole pixel budget."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from PIL import Image

from imagesvc.tools.image_work import image_work
from imagesvc.web.app_keys import SERVICES
from tests.http.conftest import MakeClient
from tests.http.test_search_by_image_bounds import _crop

BOUNDARY = "slot"
ROUTES = {  # door -> (path, content type, body framing)
    "rest": ("/api/gallery/search-by-image", "image/jpeg"),
    "page": ("/search-by-image", f"multipart/form-data; boundary={BOUNDARY}"),
}


def _framed(door: str, picture: bytes) -> bytes:
    if door == "rest":
        return picture
    head = f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="image"; filename="a.jpg"\r\n\r\n'.encode()
    return head + picture + f"\r\n--{BOUNDARY}--\r\n".encode()


async def _slow(body: bytes, release: asyncio.Event) -> AsyncIterator[bytes]:
    """The first half of ``body`` now, the rest once ``release`` is set: an upload still arriving."""
    yield body[: len(body) // 2]
    await release.wait()
    yield body[len(body) // 2 :]


@pytest.mark.parametrize("door", ["rest", "page"])
async def test_parallel_uploads_of_one_caller_are_refused_unread_while_one_is_arriving(
    make_client: MakeClient, demo_library: dict[str, Any], door: str
) -> None:
    client = await make_client(search_wait=600)
    path, content_type = ROUTES[door]
    body = _framed(door, _crop(demo_library))
    release = asyncio.Event()
    headers = {"Content-Type": content_type, "Accept": "text/html" if door == "page" else "application/json"}
    first = asyncio.ensure_future(client.post(path, data=_slow(body, release), headers=headers))
    # The event, not a sleep: the first upload holds its caller's slot (taken before its body is read) and waits for
    # the rest of its body. A bound only a hang reaches.
    work = image_work(client.app[SERVICES])
    async with asyncio.timeout(60):
        while sum(work._callers.values()) < 1:
            await asyncio.sleep(0.01)
    others = [client.post(path, data=_slow(body, release), headers=headers) for _ in range(3)]
    refused = await asyncio.wait_for(asyncio.gather(*others), 20)  # their bodies are never finished meanwhile
    for response in refused:
        assert response.status == 429, await response.text()
        assert int(response.headers["Retry-After"]) > 0
    assert not first.done()
    release.set()
    answer = await asyncio.wait_for(first, 120)
    assert answer.status == 200, await answer.text()
    again = await client.post(path, data=body, headers=headers)  # the slot is free once the search is answered
    assert again.status == 200, await again.text()


async def test_a_tiff_sized_only_at_its_end_runs_alone_not_beside_another(make_client: MakeClient) -> None:
    """A 176 KB TIFF of 6000 x 6000 (its directory at the end, as Pillow writes it) decodes to 108 MB: priced from
    its first bytes it ran beside others as a 4 MB search; now it takes the whole pixel budget, so a second such
    search from another caller finds no room and, with no queue, is refused with Retry-After."""
    tiff = io.BytesIO()
    Image.new("RGB", (6000, 6000), (200, 100, 50)).save(tiff, "TIFF", compression="tiff_adobe_deflate")
    client = await make_client(
        search_wait=600, image_search_threads=2, image_search_queue=0, trusted_proxies=("127.0.0.1",)
    )

    async def search(n: int) -> tuple[int, str, str | None]:
        headers = {"Content-Type": "image/tiff", "X-Forwarded-For": f"203.0.113.{n}"}
        response = await client.post(ROUTES["rest"][0], data=tiff.getvalue(), headers=headers)
        return response.status, await response.text(), response.headers.get("Retry-After")

    answers = sorted(await asyncio.gather(search(1), search(2)))
    assert [status for status, _, _ in answers] == [200, 503], answers
    assert int(answers[1][2] or 0) > 0


async def test_a_form_whose_charset_field_is_not_a_charset_is_a_400_on_both_doors(client: TestClient) -> None:
    """RFC 7578's ``_charset_`` field, sent first and longer than any charset name, was a 500."""
    form = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="_charset_"\r\n\r\n{"x" * 40}\r\n'
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="image"; filename="a.jpg"\r\n\r\n\xff\xd8\r\n'
        f"--{BOUNDARY}--\r\n"
    ).encode("latin-1")
    headers = {"Content-Type": ROUTES["page"][1]}
    rest = await client.post(ROUTES["rest"][0], data=form, headers=headers)
    body = await rest.json()
    assert rest.status == 400 and body["error"] == "invalid_request", body
    assert "_charset_" in body["message"] and body["recovery"]
    page = await client.post(ROUTES["page"][0], data=form, headers=headers | {"Accept": "text/html"})
    assert page.status == 400 and page.content_type == "text/html"
    assert "_charset_" in await page.text()
