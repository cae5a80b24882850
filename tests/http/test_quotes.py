"""Quotes and book text over HTTP on the demo library: citation blocks, colophons for keys, the text budget, errors."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from colophon import decode, detect
from imagesvc import tools
from imagesvc.access import MILLI
from imagesvc.access.identity import Caller
from imagesvc.access.meter import Meter
from imagesvc.catalog import Catalog
from imagesvc.catalog.api_keys import create_key
from imagesvc.errors import InvalidRequest, NotFound
from imagesvc.web.app_keys import ACCESS, SERVICES
from tests.library import SITE

SPECULUM = "demo-speculum-fornacum"
GART = "demo-gart-der-kreuter"
PAGE3_OCR = "CAP. II. De vaſis. Alembicus ſuper cucurbitam ponitur, & roſtrum in receptaculum deſcendit."
TAGS = re.compile("[\U000e0000-\U000e007f]")
ANONYMOUS = "ip:127.0.0.1"


def _key(data_dir: Path, tier: str = "free") -> tuple[str, str]:
    catalog = Catalog(data_dir / "catalog.sqlite3")
    try:
        key, record = create_key(catalog, tier, "quotes test")
    finally:
        catalog.close()
    return key, record.id


def _texts(quote: dict[str, Any]) -> list[str]:
    """Every served text field of a quote body, context pages included."""
    fields = [quote[f] for f in ("ocr", "translation", "original") if quote.get(f) is not None]
    for page in quote.get("context", []):
        fields += [page[f] for f in ("ocr", "translation", "original") if page.get(f) is not None]
    return fields


async def _spend(client: TestClient, subject: str, pool: str, units: int, limit: int) -> None:
    """Use up ``units`` of a pool in the access backend, as earlier traffic would have."""
    access = client.server.app[ACCESS]
    reservation = await access.reserve(subject, pool, units * MILLI, limit * MILLI)  # stored in thousandths
    assert await access.commit(reservation)


async def test_quote_answers_with_the_spec_citation_block(client: TestClient) -> None:
    resp = await client.get(f"/api/books/{SPECULUM}/quote", params={"page": "3"})
    body = await resp.json()
    assert resp.status == 200
    assert body["quote"]["ocr"] == PAGE3_OCR
    assert body["quote"]["original"].startswith("Cap. II. De vasis.")
    assert body["quote"]["translation"].startswith("Chapter 2. On vessels.")
    assert body["citation"] == {
        "inline": "(Johannes Balthasar Kesslerus 1612, p. 3)",
        "footnote": "Johannes Balthasar Kesslerus, Speculum Fornacum Philosophicarum (demo), trans. Demo Translator "
        "Anna Example (1612), p. 3. DOI: 10.5281/zenodo.1000001",
        "bibliography": "Johannes Balthasar Kesslerus. Speculum Fornacum Philosophicarum (demo). Translated by Demo "
        "Translator Anna Example. 1612. DOI: 10.5281/zenodo.1000001",
        "citation_url": f"{SITE}/book/{SPECULUM}?page=3",
        "doi_url": "https://doi.org/10.5281/zenodo.1000001",
    }
    assert body["license"].startswith("https://creativecommons.org/")
    assert body["colophon"] is False
    assert all(detect(text) == "none" and not TAGS.search(text) for text in _texts(body["quote"]))
    assert '"text";r=499' in resp.headers["RateLimit"]


async def test_verify_is_the_same_answer(client: TestClient) -> None:
    quote = await (await client.get(f"/api/books/{SPECULUM}/quote", params={"page": "2"})).json()
    book_id = quote["quote"]["book_id"]
    verify = await client.get("/api/verify", params={"book_id": book_id, "page": "2"})
    assert verify.status == 200
    assert await verify.json() == quote


async def test_book_without_year_or_doi_cites_sensibly(client: TestClient) -> None:
    body = await (await client.get(f"/api/books/{GART}/quote", params={"page": "2"})).json()
    assert body["citation"] == {
        "inline": "(Hieronymus Grünwalder n.d., p. 2)",
        "footnote": "Hieronymus Grünwalder, Gart der Kreüter vnd Wurtzeln (demo) (n.d.), p. 2.",
        "bibliography": "Hieronymus Grünwalder. Gart der Kreüter vnd Wurtzeln (demo). n.d.",
        "citation_url": f"{SITE}/book/{GART}?page=2",
        "doi_url": None,
    }


async def test_context_and_original_switches(client: TestClient) -> None:
    body = await (
        await client.get(
            f"/api/books/{SPECULUM}/quote", params={"page": "1", "include_original": "false", "include_context": "true"}
        )
    ).json()
    assert "original" not in body["quote"]
    assert [p["page"] for p in body["quote"]["context"]] == [2]  # page 1 has no page before it
    assert all("original" not in p for p in body["quote"]["context"])
    assert (body["pages_requested"], body["pages_served"], body["truncated"]) == (2, 2, False)


async def test_page_without_translation(client: TestClient) -> None:
    quote = await (await client.get(f"/api/books/{SPECULUM}/quote", params={"page": "5"})).json()
    assert quote["quote"]["translation"] is None
    assert quote["quote"]["available"] == ["ocr", "original"]
    resp = await client.get(f"/api/books/{SPECULUM}/text", params={"content": "translation", "from": "5", "to": "5"})
    body = await resp.json()
    assert resp.status == 404
    assert body["error"] == "not_found"
    assert body["available"] == ["ocr", "original"]
    assert "OCR text and original-language text" in body["message"]
    assert any("content=ocr" in hint for hint in body["recovery"])


@pytest.mark.parametrize(
    ("path", "params", "status", "says"),
    [
        (f"/api/books/{SPECULUM}/quote", {"page": "99"}, 404, "pages 1–8"),
        ("/api/books/no-such-book/quote", {"page": "1"}, 404, "no-such-book"),
        (f"/api/books/{SPECULUM}/quote", {"page": "three"}, 400, "'page'"),
        (f"/api/books/{SPECULUM}/quote", {}, 400, "'page' is required"),
        (f"/api/books/{SPECULUM}/quote", {"page": "2", "include_context": "maybe"}, 400, "include_context"),
        ("/api/verify", {"page": "2"}, 400, "'book_id' is required"),
        (f"/api/books/{SPECULUM}/text", {"from": "6", "to": "2"}, 400, "'from' (6) is after 'to' (2)"),
        (f"/api/books/{SPECULUM}/text", {"content": "everything"}, 400, "ocr, translation, both"),
        (f"/api/books/{SPECULUM}/text", {"format": "xml"}, 400, "json, plain"),
        (f"/api/books/{SPECULUM}/text", {"from": "20", "to": "30"}, 404, "pages 1–8"),
    ],
)
async def test_errors_are_json_with_recovery(
    client: TestClient, path: str, params: dict[str, str], status: int, says: str
) -> None:
    resp = await client.get(path, params=params)
    body = await resp.json()
    assert resp.status == status
    assert says in body["message"]
    assert body["recovery"]
    assert body["error"] == ("not_found" if status == 404 else "invalid_request")


async def test_book_text_json_lists_pages_and_what_is_missing(client: TestClient) -> None:
    both = await (await client.get(f"/api/books/{SPECULUM}/text")).json()
    assert [p["page"] for p in both["pages"]] == list(range(1, 9))
    assert both["pages"][2]["ocr"] == PAGE3_OCR
    assert both["pages"][4]["translation"] is None  # page 5 is served for its OCR text
    assert (both["pages_served"], both["truncated"], both["max_pages"]) == (8, False, 200)
    only = await (await client.get(f"/api/books/{SPECULUM}/text", params={"content": "translation"})).json()
    assert [p["page"] for p in only["pages"]] == [1, 2, 3, 4, 6, 7, 8]
    assert all(set(p) == {"page", "citation_url", "translation"} for p in only["pages"])
    assert only["missing"] == [{"page": 5, "available": ["ocr", "original"]}]


async def test_book_text_plain_has_page_headings(client: TestClient) -> None:
    resp = await client.get(f"/api/books/{SPECULUM}/text", params={"format": "plain", "content": "ocr", "from": "2"})
    text = await resp.text()
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert text.startswith("Speculum Fornacum Philosophicarum (demo)\n")
    assert f"=== Page 3 · {SITE}/book/{SPECULUM}?page=3 ===\n[OCR]\n{PAGE3_OCR}\n" in text
    assert "=== Page 1 " not in text and "=== Page 8 " in text
    assert "[Translation]" not in text
    assert not TAGS.search(text)


def _blocks(plain: str) -> list[str]:
    """The page blocks of a plain text response, exactly as sealed."""
    return re.split(r"\n\n(?==== Page )", plain.removesuffix("\n"))[1:]


async def test_key_text_carries_a_colophon_naming_the_key(make_client: Any, data_dir: Path) -> None:
    key, ref = _key(data_dir)
    client = await make_client()
    headers = {"Authorization": f"Bearer {key}"}
    secret = client.server.app[SERVICES].colophon_secret
    assert secret == (data_dir / "colophon.secret").read_text().strip().encode()
    quote = await (
        await client.get(
            f"/api/books/{SPECULUM}/quote", params={"page": "3", "include_context": "true"}, headers=headers
        )
    ).json()
    assert quote["colophon"] is True
    served = _texts(quote["quote"])
    assert len(served) == 9  # three fields on pages 2, 3 and 4
    for text in served:
        found = decode(text, secret)
        assert found is not None and found.authentic and found.bound
        assert found.note.key_ref == ref
        assert found.note.title.startswith("Speculum Fornacum")
        assert (found.note.year, found.note.doi) == (1612, "10.5281/zenodo.1000001")
        for form in ("NFC", "NFD", "NFKC", "NFKD"):
            assert decode(unicodedata.normalize(form, text), secret) is None
    assert decode(quote["quote"]["ocr"], secret).note.url == f"{SITE}/book/{SPECULUM}?page=3"  # type: ignore[union-attr]
    assert quote["quote"]["ocr"].startswith(PAGE3_OCR)

    plain = await (
        await client.get(f"/api/books/{GART}/text", params={"format": "plain", "to": "3"}, headers=headers)
    ).text()
    blocks = _blocks(plain)
    assert len(blocks) == 3
    for number, block in enumerate(blocks, start=1):
        found = decode(block, secret)
        assert found is not None and found.authentic and found.bound
        assert (found.note.key_ref, found.note.url) == (ref, f"{SITE}/book/{GART}?page={number}")
        assert found.note.year is None and found.note.doi is None


async def test_signed_in_text_carries_no_colophon(make_client: Any) -> None:
    import time

    from imagesvc.access.identity import sign_session

    client = await make_client()
    token = sign_session("reader-7", int(time.time()) + 3600, "test-secret")
    body = await (
        await client.get(
            f"/api/books/{SPECULUM}/text", params={"to": "2"}, headers={"Authorization": f"Bearer {token}"}
        )
    ).json()
    assert body["colophon"] is False
    assert all(detect(p[f]) == "none" for p in body["pages"] for f in ("ocr", "translation"))


async def test_budget_cut_serves_what_fits_and_says_so(client: TestClient) -> None:
    await _spend(client, ANONYMOUS, "text", 495, 500)
    resp = await client.get(f"/api/books/{SPECULUM}/text")
    body = await resp.json()
    assert resp.status == 200
    assert [p["page"] for p in body["pages"]] == [1, 2, 3, 4, 5]
    assert body["truncated"] is True
    assert (body["pages_requested"], body["pages_served"], body["next_from"]) == (8, 5, 6)
    assert body["truncated_reason"] == "budget"
    assert resp.headers["X-Pages-Truncated"] == "requested=8; served=5; reason=budget; next_from=6"

    limits = await (await client.get("/api/rate_limit")).json()
    assert limits["pools"]["text"]["remaining"] == 0
    assert limits["pools"]["images"]["used"] == 0

    denied = await client.get(f"/api/books/{SPECULUM}/quote", params={"page": "1"})
    assert denied.status == 429
    assert (await denied.json())["pool"] == "text"


async def test_context_pages_are_dropped_when_the_budget_runs_out(client: TestClient) -> None:
    await _spend(client, ANONYMOUS, "text", 499, 500)
    resp = await client.get(f"/api/books/{SPECULUM}/quote", params={"page": "4", "include_context": "true"})
    body = await resp.json()
    assert resp.status == 200
    assert body["quote"]["ocr"].startswith("Sol & Luna")
    assert body["quote"]["context"] == []
    assert (body["pages_requested"], body["pages_served"], body["truncated"]) == (3, 1, True)
    assert resp.headers["X-Pages-Truncated"] == "requested=3; served=1; reason=budget"


async def test_a_failed_request_costs_no_text(client: TestClient) -> None:
    assert (await client.get(f"/api/books/{SPECULUM}/quote", params={"page": "99"})).status == 404
    assert (
        await client.get(f"/api/books/{SPECULUM}/text", params={"content": "translation", "from": "5"})
    ).status == 200
    limits = await (await client.get("/api/rate_limit")).json()
    assert limits["pools"]["text"]["used"] == 3  # pages 6, 7 and 8: page 5 has no translation and costs nothing


async def _get_quotes(client: TestClient, **arguments: Any) -> dict[str, Any]:
    app = client.server.app
    caller = Caller("anonymous", ANONYMOUS, "anonymous")
    meter = Meter(app[ACCESS], caller)
    try:
        result = await tools.call(
            app[SERVICES], "get_quotes", {"book_id": SPECULUM, **arguments}, tools.Call(caller, meter)
        )
    except BaseException:
        await meter.settle(False)
        raise
    await meter.settle(True)
    return result


async def test_get_quotes_by_list_and_by_range(client: TestClient) -> None:
    listed = await _get_quotes(client, pages=[7, 2])
    assert [q["quote"]["page"] for q in listed["quotes"]] == [7, 2]
    assert listed["quotes"][0]["citation"]["inline"] == "(Johannes Balthasar Kesslerus 1612, p. 7)"
    ranged = await _get_quotes(client, **{"from": 6, "to": 30})
    assert [q["quote"]["page"] for q in ranged["quotes"]] == [6, 7, 8]
    assert (ranged["pages_served"], ranged["truncated"], ranged["missing_pages"]) == (3, False, list(range(9, 31)))
    limits = await (await client.get("/api/rate_limit")).json()
    assert limits["pools"]["text"]["used"] == 5


async def test_get_quotes_refuses_bad_requests(client: TestClient) -> None:
    with pytest.raises(InvalidRequest, match="at most 25 pages"):
        await _get_quotes(client, **{"from": 1, "to": 26})
    with pytest.raises(InvalidRequest, match="pages"):
        await _get_quotes(client, pages=list(range(1, 27)))
    with pytest.raises(InvalidRequest, match="not both"):
        await _get_quotes(client, pages=[1], **{"from": 1})
    with pytest.raises(InvalidRequest, match="not both and not neither"):
        await _get_quotes(client)
    with pytest.raises(NotFound, match="no page 9, 12; it has pages 1–8"):
        await _get_quotes(client, pages=[9, 12])
    with pytest.raises(NotFound, match="no page in 20–30; it has pages 1–8"):
        await _get_quotes(client, **{"from": 20, "to": 30})


async def test_get_quotes_skips_missing_pages_alike_for_a_list_and_a_range(client: TestClient) -> None:
    """One rule for both forms: pages the book lacks are skipped and named in missing_pages; only none is a 404."""
    listed = await _get_quotes(client, pages=[1, 9, 12, 3])
    assert [q["quote"]["page"] for q in listed["quotes"]] == [1, 3]
    assert listed["missing_pages"] == [9, 12]
    assert (listed["pages_requested"], listed["pages_served"], listed["truncated"]) == (4, 2, False)
    ranged = await _get_quotes(client, **{"from": 7, "to": 10})
    assert [q["quote"]["page"] for q in ranged["quotes"]] == [7, 8]
    assert ranged["missing_pages"] == [9, 10]
    assert (ranged["pages_requested"], ranged["pages_served"], ranged["truncated"]) == (4, 2, False)
    whole = await _get_quotes(client, pages=[2])
    assert whole["missing_pages"] == []
    limits = await (await client.get("/api/rate_limit")).json()
    assert limits["pools"]["text"]["used"] == 5  # only served pages cost


async def test_text_tools_carry_the_same_attribution_as_get_book(client: TestClient) -> None:
    book = await (await client.get(f"/api/books/{SPECULUM}")).json()
    full = book["attribution"]
    assert {"institution", "institution_url", "item_url", "license", "doi", "doi_url"} <= full.keys()
    assert full["doi"] == "10.5281/zenodo.1000001" and full["license"].startswith("https://creativecommons.org/")
    quote = await (await client.get(f"/api/books/{SPECULUM}/quote", params={"page": "2"})).json()
    text = await (await client.get(f"/api/books/{SPECULUM}/text", params={"from": "1", "to": "2"})).json()
    quotes = await _get_quotes(client, pages=[1, 2])
    assert quote["attribution"] == text["attribution"] == quotes["attribution"] == full


async def test_get_quotes_cut_by_budget_names_the_rest(client: TestClient) -> None:
    await _spend(client, ANONYMOUS, "text", 498, 500)
    ranged = await _get_quotes(client, **{"from": 3, "to": 6})
    assert [q["quote"]["page"] for q in ranged["quotes"]] == [3, 4]
    assert (ranged["truncated"], ranged["next_from"], ranged["remaining_pages"]) == (True, 5, [5, 6])


async def test_get_quotes_over_mcp_seals_each_field_for_a_key(make_client: Any, data_dir: Path) -> None:
    key, ref = _key(data_dir)
    client = await make_client()
    secret = client.server.app[SERVICES].colophon_secret
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "get_quotes", "arguments": {"book_id": GART, "pages": [1, 2]}},
    }
    resp = await client.post("/api/mcp", json=message, headers={"Authorization": f"Bearer {key}"})
    result = (await resp.json())["result"]
    assert not result.get("isError")
    quotes = result["structuredContent"]["quotes"]
    assert [q["citation"]["inline"] for q in quotes] == [
        "(Hieronymus Grünwalder n.d., p. 1)",
        "(Hieronymus Grünwalder n.d., p. 2)",
    ]
    for q in quotes:
        texts = _texts(q["quote"])
        assert len(texts) == 3
        assert all(decode(t, secret).note.key_ref == ref for t in texts)  # type: ignore[union-attr]
    limits = await (await client.get("/api/rate_limit", headers={"Authorization": f"Bearer {key}"})).json()
    assert (limits["pools"]["text"]["used"], limits["pools"]["images"]["used"]) == (2, 0)
