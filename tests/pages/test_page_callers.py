"""Pages know the caller as REST does: a signed-in reader's session cookie lifts the daily budgets, and a key's
reading page carries the same sealed text (colophon) the quote tool gives that key."""

from __future__ import annotations

import time
from pathlib import Path

from aiohttp.test_utils import TestClient

from colophon import decode
from imagesvc.access.identity import sign_session
from imagesvc.catalog import Catalog
from imagesvc.catalog.api_keys import create_key
from imagesvc.web.app_keys import SERVICES
from tests.pages.markup import parse

HTML = {"Accept": "text/html"}
BOOK = "demo-speculum-fornacum"


async def test_a_signed_in_reader_gets_the_signed_in_allowance(client: TestClient) -> None:
    anonymous = await client.get(f"/book/{BOOK}?page=2", headers=HTML)
    assert '"text";q=500;' in anonymous.headers["RateLimit-Policy"]
    token = sign_session("reader-7", int(time.time()) + 3600, "test-secret")
    signed_in = await client.get(f"/book/{BOOK}?page=2", headers=HTML, cookies={"imagesvc_session": token})
    assert signed_in.status == 200
    assert '"text";q=1000;' in signed_in.headers["RateLimit-Policy"]
    api = await client.get("/api/books", cookies={"imagesvc_session": token})  # and the API's request limit
    assert '"requests";q=1000;' in api.headers["RateLimit-Policy"]


async def test_a_keys_reading_page_shows_the_text_sealed_for_that_key(client: TestClient, data_dir: Path) -> None:
    catalog = Catalog(data_dir / "catalog.sqlite3")
    try:
        key, record = create_key(catalog, "free", "pages test")
    finally:
        catalog.close()
    auth = {**HTML, "Authorization": f"Bearer {key}"}
    secret = client.server.app[SERVICES].colophon_secret
    api = await (await client.get(f"/api/books/{BOOK}/quote", params={"page": "3"}, headers=auth)).json()
    doc = parse(await (await client.get(f"/book/{BOOK}?page=3", headers=auth)).text())
    ocr = "".join(doc.all("div", cls="body")[0].parts)  # exactly as served, invisible characters included
    found = decode(ocr, secret)
    assert found is not None and found.authentic and found.bound
    assert found.note.key_ref == record.id and found.note.url.endswith(f"/book/{BOOK}?page=3")
    assert ocr == api["quote"]["ocr"]
    plain = parse(await (await client.get(f"/book/{BOOK}?page=3", headers=HTML)).text())
    assert decode("".join(plain.all("div", cls="body")[0].parts), secret) is None  # anonymous text is as stored
