"""The gallery over HTTP: CLIP search with the tiny random model, filters, paging, collections and /vectors."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp.test_utils import TestClient
from PIL import Image, ImageFilter, ImageOps

from imagesvc.catalog import Catalog
from imagesvc.catalog.writes import remove_illustration, withdraw_book
from imagesvc.search.fusion import DENSE_FLOOR, W_FTS
from imagesvc.web.app_keys import SERVICES
from tests.http.conftest import MakeClient
from tests.library import SITE, settings_for
from tests.search.conftest import TINY, index_library

IMAGE_HOST = f"{SITE}/img/"


@pytest.fixture
async def clip_client(make_client: MakeClient, data_dir: Path) -> TestClient:
    await index_library(settings_for(data_dir, **TINY))
    return await make_client(**TINY, search_wait=600)  # rankings must not change as the text model comes in


async def get(client: TestClient, path: str, status: int = 200, **params: Any) -> dict[str, Any]:
    response = await client.get(path, params={k: str(v) for k, v in params.items()})
    body = await response.json()
    assert response.status == status, body
    return body


def urls(item: dict[str, Any]) -> list[str]:
    return [item["image_full"], item["image_display"], item["image_thumb"]]


async def test_more_like_this_ranks_the_illustration_itself_first(clip_client: TestClient) -> None:
    ids = [i["id"] for i in (await get(clip_client, "/api/gallery", maxPerBook=1000, limit=50))["items"]]
    for iid in ids[:5]:
        body = await get(clip_client, "/api/gallery", like=iid, maxPerBook=1000, limit=5)
        assert body["items"][0]["id"] == iid
        assert body["items"][0]["similarity"] == pytest.approx(1.0, abs=1e-4)
        scores = [i["similarity"] for i in body["items"]]
        assert scores == sorted(scores, reverse=True)


async def test_text_query_uses_clip_and_says_so(clip_client: TestClient) -> None:
    body = await get(clip_client, "/api/gallery", q="serpent emblem", limit=10)
    assert body["search"]["signals"][0] == "clip" and "RANDOM" in body["search"]["clip"]
    assert body["items"] and all(i["scores"]["clip"] is not None for i in body["items"])
    assert all(u.startswith(IMAGE_HOST) for i in body["items"] for u in urls(i))
    top = body["items"][0]
    assert {"page_id", "book_id", "page", "index", "book_title", "bbox", "metadata", "citation_url"} <= top.keys()


async def test_filters_apply_before_ranking_and_max_per_book_after(clip_client: TestClient, data_dir: Path) -> None:
    body = await get(clip_client, "/api/gallery", q="title page", type="woodcut", maxPerBook=1, limit=50)
    assert all(i["type"] == "woodcut" for i in body["items"])
    # Woodcuts live in three books: each still gives its best one although other types outrank them overall.
    assert len({i["book_id"] for i in body["items"]}) == 3 == body["total"] == len(body["items"])
    two = await get(clip_client, "/api/gallery", q="title page", type="woodcut", maxPerBook=2, limit=50)
    assert two["total"] == 2 + 2 + 2 and not two["has_more"]
    year = await get(clip_client, "/api/gallery", q="fire", year_from=1600, year_to=1620, maxPerBook=1000, limit=50)
    assert year["items"] and all(1600 <= i["year"] <= 1620 for i in year["items"])
    subject = await get(clip_client, "/api/gallery", q="x", subject="Mining", maxPerBook=1000, limit=50)
    catalog = Catalog(data_dir / "catalog.sqlite3")
    mining = catalog.query_all("SELECT id FROM illustrations WHERE subjects LIKE '%\"mining\"%'")
    catalog.close()
    assert subject["total"] == len(mining) > 0 and all("mining" in i["metadata"]["subjects"] for i in subject["items"])


async def test_pages_are_stable_and_add_up_to_total(clip_client: TestClient) -> None:
    whole = await get(clip_client, "/api/gallery", q="plant", maxPerBook=1000, limit=50)
    seen = []
    for offset in range(0, whole["total"], 7):
        page = await get(clip_client, "/api/gallery", q="plant", maxPerBook=1000, limit=7, offset=offset)
        assert page["total"] == whole["total"]
        assert page["has_more"] == (offset + 7 < whole["total"])
        seen += [i["id"] for i in page["items"]]
    assert seen == [i["id"] for i in whole["items"]] and len(set(seen)) == whole["total"]


async def test_min_score_drops_weaker_matches(clip_client: TestClient) -> None:
    whole = await get(clip_client, "/api/gallery", q="star chart", maxPerBook=1000, limit=50)
    cut = whole["items"][len(whole["items"]) // 2]["similarity"]
    body = await get(clip_client, "/api/gallery", q="star chart", maxPerBook=1000, limit=50, min_score=cut)
    assert body["items"] and all(i["similarity"] >= cut for i in body["items"])
    assert body["total"] == len(body["items"]) < whole["total"]


async def test_with_the_text_model_off_search_is_keyword_only_and_says_so(make_client: MakeClient) -> None:
    client = await make_client(text_model="off")
    body = await get(client, "/api/gallery", q="serpent", maxPerBook=1000)
    assert body["search"]["signals"] == ["full-text"] and body["search"]["mode"] == "full-text"
    assert body["search"]["clip"].startswith("off") and body["search"]["text_model"].startswith("off")
    assert body["items"] and all(i["scores"]["clip"] is None and i["scores"]["dense"] is None for i in body["items"])
    assert all("serpent" in str(i).lower() for i in body["items"])
    # what keyword search cannot do: a paraphrase shares no word with the description it means
    assert (await get(client, "/api/gallery", q="snake eating itself"))["total"] == 0
    empty = await get(client, "/api/vectors/gallery")
    assert empty["empty"] and empty["vectors"] == [] and "index" in empty["message"]


@pytest.fixture
async def text_client(make_client: MakeClient) -> TestClient:
    """The embedded default (no CLIP weights, dense text model on), whose searches wait as long as the text model
    needs to load and new illustrations need to be embedded or hashed (a server warms these up when it starts)."""
    return await make_client(search_wait=600)


async def test_default_app_finds_a_paraphrase_and_says_which_signals_ranked(text_client: TestClient) -> None:
    before = (await get(text_client, "/health"))["search"]
    assert "loads on the first text query" in before["text_model"] and before["signals"] == ["full-text"]
    body = await get(text_client, "/api/gallery", q="snake eating itself", maxPerBook=1000)
    assert body["search"]["signals"] == ["dense-text", "full-text"]
    top = body["items"][0]
    assert "serpent biting its own tail" in top["description"]
    assert top["scores"]["dense"] > 0.3 and top["scores"]["keyword"] is None and top["scores"]["clip"] is None
    assert top["similarity"] == pytest.approx(top["scores"]["text"], abs=1e-6)
    after = (await get(text_client, "/health"))["search"]
    assert after["signals"] == ["dense-text", "full-text"]
    assert after["text_model"].startswith("on: multilingual-e5-small")


async def test_misspelt_words_are_corrected_and_the_response_says_so(text_client: TestClient) -> None:
    body = await get(text_client, "/api/gallery", q="alembik", maxPerBook=1000)
    assert body["search"]["corrected"] == {"alembik": "alembic"}
    assert "alembic" in body["items"][0]["description"].lower()


async def test_a_new_books_words_are_corrected_to_without_reading_the_library_again(
    text_client: TestClient, data_dir: Path
) -> None:
    """A book written by another process joins the spelling vocabulary by itself: its words are read, the library's
    are not read again (``search.vocabulary`` in /health says how often each)."""
    from tests.catalog.test_catalog import book, illus, write_book

    await get(text_client, "/api/gallery", q="alembik")  # the vocabulary in service, read whole
    musaeum = book(0x5A1, title="Musaeum Hermeticum", year=1625)
    catalog = Catalog(data_dir / "catalog.sqlite3")  # an operator's connection, as ingest would open
    try:
        write_book(catalog, musaeum, {1: [illus(musaeum["id"], 1, 0, "A zqsalamander in the athanor")]})
    finally:
        catalog.close()
    body = await get(text_client, "/api/gallery", q="zqsalamandre")
    assert body["search"]["corrected"] == {"zqsalamandre": "zqsalamander"}
    assert body["items"][0]["book_id"] == musaeum["id"]
    words = (await get(text_client, "/health"))["search"]["vocabulary"]
    assert (words["read_whole"], words["updated_by_book"]) == (1, 1), words


def _mentions(item: dict[str, Any], word: str) -> bool:
    text = " ".join(
        [item["description"] or "", item["museum_description"] or "", str(item["metadata"]), item["type"] or ""]
    )
    return word in text.lower()


async def test_negative_terms_leave_out_what_mentions_them(text_client: TestClient) -> None:
    plain = await get(text_client, "/api/gallery", q="plan of a mountain district", maxPerBook=1000, limit=50)
    assert any(_mentions(i, "map") for i in plain["items"])
    minus = await get(text_client, "/api/gallery", q="plan of a mountain district -map", maxPerBook=1000, limit=50)
    assert minus["items"] and not any(_mentions(i, "map") for i in minus["items"])
    assert minus["search"]["excluded_terms"] == ["map"] and minus["total"] < plain["total"]
    # the same through the tool's exclude argument, over MCP
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "search_images",
            "arguments": {"query": "plan of a mountain district", "exclude": "map", "max_per_book": 1000, "limit": 50},
        },
    }
    response = await text_client.post("/api/mcp", json=message)
    result = (await response.json())["result"]
    assert result["isError"] is False
    ids = [i["id"] for i in result["structuredContent"]["items"]]
    assert ids == [i["id"] for i in minus["items"]]


async def test_min_score_is_on_the_fused_scale(text_client: TestClient) -> None:
    whole = await get(text_client, "/api/gallery", q="furnace for heating", maxPerBook=1000, limit=50)
    scores = [i["similarity"] for i in whole["items"]]
    assert scores == sorted(scores, reverse=True)
    for item in whole["items"]:
        dense, keyword = item["scores"]["dense"] or 0.0, item["scores"]["keyword"] or 0.0
        assert item["similarity"] == pytest.approx(dense + W_FTS * keyword, abs=1e-4)
        assert keyword > 0 or dense >= DENSE_FLOOR  # a result by its words, or by its meaning
    cut = await get(text_client, "/api/gallery", q="furnace for heating", maxPerBook=1000, limit=50, min_score=0.45)
    assert cut["items"] and all(i["similarity"] >= 0.45 for i in cut["items"]) and cut["total"] < whole["total"]


async def test_collection_counts_match_items_after_removal_and_withdrawal(client: TestClient, data_dir: Path) -> None:
    before = {c["slug"]: c for c in (await get(client, "/api/gallery/collections"))["items"]}
    slug = next(iter(before))
    items = (await get(client, f"/api/gallery/collections/{slug}"))["items"]
    catalog = Catalog(data_dir / "catalog.sqlite3")  # an operator's connection, as the CLI would open
    with catalog.transaction() as conn:
        remove_illustration(conn, items[0]["id"])
        withdraw_book(conn, items[-1]["book_id"])
    catalog.close()
    listing = (await get(client, "/api/gallery/collections"))["items"]
    for entry in listing:
        one = await get(client, f"/api/gallery/collections/{entry['slug']}")
        assert entry["imageCount"] == one["imageCount"] == len(one["items"])
        assert all(u.startswith(IMAGE_HOST) for i in one["items"] for u in urls(i))
    assert next(e for e in listing if e["slug"] == slug)["imageCount"] < before[slug]["imageCount"]
    gone = await get(client, f"/api/gallery/images/{items[0]['id']}", 404)
    assert gone["error"] == "not_found" and gone["recovery"]


async def test_vectors_page_by_keyset_in_both_formats(clip_client: TestClient) -> None:
    pages, after = [], None
    while True:
        params = {"limit": 10} | ({"after": after} if after else {})
        body = await get(clip_client, "/api/vectors/gallery", **params)
        pages.append(body)
        after = body["next_cursor"]
        if after is None:
            break
    rows = [v for p in pages for v in p["vectors"]]
    assert len(rows) == pages[0]["total"] and [r["id"] for r in rows] == sorted(r["id"] for r in rows)
    assert pages[0]["dims"] == 64
    b64 = await get(clip_client, "/api/vectors/gallery", limit=10, format="base64")
    for plain, packed in zip(pages[0]["vectors"], b64["vectors"], strict=True):
        decoded = np.frombuffer(base64.b64decode(packed["embedding"]), dtype="<f4")
        assert np.array_equal(decoded, np.array(plain["embedding"], dtype=np.float32))
    books = await get(clip_client, "/api/vectors/books", limit=1000)
    assert books["returned"] == 4 and books["next_cursor"] is None
    assert (await get(clip_client, "/api/vectors/artworks"))["empty"] is True
    unknown = await get(clip_client, "/api/vectors/faces", 404)
    assert unknown["stores"] == ["books", "gallery", "clip", "artworks"]


async def test_image_and_book_images(client: TestClient) -> None:
    first = (await get(client, "/api/gallery", limit=1))["items"][0]
    one = await get(client, f"/api/gallery/images/{first['id']}")
    assert one["book"]["title"] == first["book_title"] and one["citation_url"].startswith(SITE)
    assert set(one["sizes"]) == {"full", "display", "thumb"}
    assert all(one[f"image_{t}"].startswith(IMAGE_HOST) for t in one["sizes"])
    book = await get(client, f"/api/books/{first['book_id']}/images", limit=2)
    assert book["total"] >= len(book["items"]) == 2 and book["has_more"]
    await get(client, "/api/books/no-such-book/images", 404)


@pytest.mark.parametrize(
    "params",
    [{"limit": 0}, {"limit": 51}, {"maxPerBook": "x"}, {"min_score": "high"}, {"year_from": "1600s"}, {"offset": -1}],
)
async def test_bad_parameters_are_400_with_hints(client: TestClient, params: dict[str, Any]) -> None:
    body = await get(client, "/api/gallery", 400, **params)
    assert body["error"] == "invalid_request" and body["recovery"]


async def test_unknown_ids_are_404(clip_client: TestClient) -> None:
    for path, params in [
        ("/api/gallery", {"like": "nope:0"}),
        ("/api/gallery", {"book": "nope"}),
        ("/api/gallery", {"collection": "nope"}),
        ("/api/gallery/collections/nope", {}),
    ]:
        body = await get(clip_client, path, 404, **params)
        assert body["error"] == "not_found" and body["recovery"]


async def test_enumeration_reaches_every_live_illustration_exactly_once(client: TestClient, data_dir: Path) -> None:
    """maxPerBook=1000 enumerates: near-duplicates are items of their own, total counts illustrations, and the
    keyset cursor walks the whole catalog; a book's count agrees with get_book_images."""
    catalog = Catalog(data_dir / "catalog.sqlite3")
    live = {r["id"] for r in catalog.query_all("SELECT id FROM illustrations WHERE removed = 0")}
    catalog.close()
    seen: list[str] = []
    params: dict[str, Any] = {"maxPerBook": 1000, "limit": 7}
    while True:
        page = await get(client, "/api/gallery", **params)
        assert page["total"] == len(live)
        seen += [i["id"] for i in page["items"]]
        assert page["has_more"] == (page["next_cursor"] is not None)
        if page["next_cursor"] is None:
            break
        params["cursor"] = page["next_cursor"]
    assert len(seen) == len(set(seen)) == len(live) and set(seen) == live
    by_offset = await get(client, "/api/gallery", maxPerBook=1000, limit=50)
    assert [i["id"] for i in by_offset["items"]] == seen[:50]
    grouped = [i for i in by_offset["items"] if i["duplicates"]]
    assert grouped, "the demo library has near-duplicate plates"
    folded = await get(client, "/api/gallery", maxPerBook=1000, limit=50, fold_duplicates="true")
    assert folded["total"] < len(live) and not {d for i in folded["items"] for d in i["duplicates"]} & {
        i["id"] for i in folded["items"]
    }
    for book_id in {i["book_id"] for i in by_offset["items"]}:
        images = await get(client, f"/api/books/{book_id}/images", limit=200)
        listed = await get(client, "/api/gallery", book=book_id, maxPerBook=1000, limit=50)
        assert images["total"] == listed["total"] == sum(1 for i in seen if i.startswith(book_id + "-"))


async def test_cursor_goes_on_after_its_illustration_is_removed(client: TestClient, data_dir: Path) -> None:
    first = await get(client, "/api/gallery", maxPerBook=1000, limit=5)
    after = await get(client, "/api/gallery", maxPerBook=1000, limit=5, cursor=first["next_cursor"])
    catalog = Catalog(data_dir / "catalog.sqlite3")
    with catalog.transaction() as conn:
        remove_illustration(conn, first["next_cursor"])
    catalog.close()
    again = await get(client, "/api/gallery", maxPerBook=1000, limit=5, cursor=first["next_cursor"])
    assert [i["id"] for i in again["items"]] == [i["id"] for i in after["items"]]


@pytest.mark.parametrize(
    "params",
    [
        {"cursor": "not-a-cursor"},
        {"cursor": "abc-1:0", "offset": 5},
        {"cursor": "abc-1:0", "q": "serpent"},
    ],
)
async def test_bad_cursors_are_400(client: TestClient, params: dict[str, Any]) -> None:
    body = await get(client, "/api/gallery", 400, **params)
    assert body["error"] == "invalid_request" and "cursor" in body["message"].lower() + str(body.get("details"))


# -- search by image ----------------------------------------------------------------------------------------------


def _printings(demo_library: dict[str, Any]) -> tuple[Path, list[dict[str, Any]]]:
    """The demo sources' folder and the printings of the shared woodblock (demo-expected.json)."""
    root = Path(demo_library["manifest"]).parent
    expected = json.loads((root / "demo-expected.json").read_text(encoding="utf-8"))
    pages = {(p["book"], p["page"]): p for p in expected["pages"]}
    printings = [
        i | {"image": pages[(i["book"], i["page"])]["image"]} for i in expected["illustrations"] if i.get("block")
    ]
    return root, printings


def _page(root: Path, printing: dict[str, Any]) -> Image.Image:
    return ImageOps.exif_transpose(Image.open(root / printing["image"])).convert("RGB")


def _jpeg(image: Image.Image, quality: int = 85) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


def _where(item: dict[str, Any]) -> tuple[str, int, int]:
    return (item["book_id"], item["page"], item["index"])


async def _book_ids(client: TestClient) -> dict[str, str]:
    books = (await get(client, "/api/books", limit=50))["items"]
    return {b["slug"]: b["id"] for b in books}


async def test_an_uploaded_crop_of_a_woodcut_finds_every_book_that_prints_it(
    text_client: TestClient, demo_library: dict[str, Any]
) -> None:
    root, printings = _printings(demo_library)
    assert len({p["book"] for p in printings}) == 3
    slugs = await _book_ids(text_client)
    want = {(slugs[p["book"]], p["page"], p["index"]) for p in printings}
    first = printings[0]
    x0, y0, x1, y1 = first["box"]
    w, h = x1 - x0, y1 - y0
    crop = _page(root, first).crop((x0 + w // 5, y0 + h // 5, x1 - w // 5, y1 - h // 5))  # the middle 60%
    response = await text_client.post(
        "/api/gallery/search-by-image", data=_jpeg(crop), headers={"Content-Type": "image/jpeg"}
    )
    body = await response.json()
    assert response.status == 200, body
    assert {_where(i) for i in body["same_block"]} == want
    assert isinstance(body["possible_printings"], list)  # verified, not the same block: shown apart
    assert not {i["id"] for i in body["possible_printings"]} & {i["id"] for i in body["same_block"]}
    assert sorted(body["books"]) == sorted(slugs[p["book"]] for p in printings)
    assert all(0 < i["match"] <= 1 for i in body["same_block"]) and body["similar"] is None
    assert body["search"]["signals"] == ["block-hashes"]


async def test_a_third_of_each_side_of_a_woodcut_finds_every_book_that_prints_it(
    text_client: TestClient, demo_library: dict[str, Any]
) -> None:
    """A reader's detail: a third of the woodcut's width and of its height (a ninth of its area, inside every
    printing's trim), sent as the raw body with ``limit`` in the query string."""
    root, printings = _printings(demo_library)
    slugs = await _book_ids(text_client)
    first = printings[0]
    x0, y0, x1, y1 = first["box"]
    w, h = x1 - x0, y1 - y0
    left, top = x0 + w * 2 // 5, y0 + h * 3 // 10
    crop = _page(root, first).crop((left, top, left + w // 3, top + h // 3))
    response = await text_client.post(
        "/api/gallery/search-by-image?limit=5", data=_jpeg(crop), headers={"Content-Type": "image/jpeg"}
    )
    body = await response.json()
    assert response.status == 200, body
    assert {_where(i) for i in body["same_block"]} == {(slugs[p["book"]], p["page"], p["index"]) for p in printings}


async def test_a_photo_of_a_page_region_finds_the_trimmed_printing_too(
    text_client: TestClient, demo_library: dict[str, Any]
) -> None:
    """A photo: the woodcut with a margin of page and text round it, turned a little, blurred, small, recompressed;
    sent as a multipart form, the way a browser uploads a file."""
    root, printings = _printings(demo_library)
    slugs = await _book_ids(text_client)
    second = printings[2]  # the smaller printing in the mining book
    x0, y0, x1, y1 = second["box"]
    w, h = x1 - x0, y1 - y0
    region = _page(root, second).crop((x0 - w // 6, y0 - h // 8, x1 + w // 8, y1 + h // 5))
    photo = region.rotate(1.5, fillcolor=(231, 218, 186)).filter(ImageFilter.GaussianBlur(1.5))
    photo = photo.resize((photo.width * 2 // 3, photo.height * 2 // 3))
    form = aiohttp.FormData()
    form.add_field("image", _jpeg(photo, 60), filename="photo.jpg", content_type="image/jpeg")
    form.add_field("limit", "10")
    response = await text_client.post("/api/gallery/search-by-image", data=form)
    body = await response.json()
    assert response.status == 200, body
    assert {_where(i) for i in body["same_block"]} == {(slugs[p["book"]], p["page"], p["index"]) for p in printings}


async def test_search_by_image_over_mcp_and_a_picture_of_another_block(
    text_client: TestClient, demo_library: dict[str, Any]
) -> None:
    root, printings = _printings(demo_library)
    expected = json.loads((root / "demo-expected.json").read_text(encoding="utf-8"))
    other = next(i for i in expected["illustrations"] if i["book"] == "demo-sefer-maarekhet-ha-kokhavim")
    pages = {(p["book"], p["page"]): p["image"] for p in expected["pages"]}
    picture = _page(root, other | {"image": pages[(other["book"], other["page"])]}).crop(other["box"])
    message = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {
            "name": "search_images_by_image",
            "arguments": {"image": base64.b64encode(_jpeg(picture)).decode()},
        },
    }
    result = (await (await text_client.post("/api/mcp", json=message)).json())["result"]
    assert result["isError"] is False
    found = result["structuredContent"]["same_block"]
    possible = result["structuredContent"]["possible_printings"]
    assert isinstance(possible, list) and not {i["id"] for i in possible} & {i["id"] for i in found}
    slugs = await _book_ids(text_client)
    assert [_where(i) for i in found][:1] == [(slugs[other["book"]], other["page"], other["index"])]
    assert not {_where(i) for i in found} & {(slugs[p["book"]], p["page"], p["index"]) for p in printings}


async def test_uploads_that_are_not_usable_images_get_clear_json_errors(
    make_client: MakeClient, demo_library: dict[str, Any]
) -> None:
    client = await make_client(upload_max_bytes=200_000)
    root = Path(demo_library["manifest"]).parent
    route = "/api/gallery/search-by-image"

    async def post(data: Any, ctype: str | None, status: int, code: str) -> dict[str, Any]:
        headers = {"Content-Type": ctype} if ctype else {}
        response = await client.post(route, data=data, headers=headers)
        body = await response.json()
        assert response.status == status and body["error"] == code and body["message"] and body["recovery"], body
        assert "RateLimit" in response.headers  # metered like any request
        return body

    await post(b"this is not a picture at all", "image/png", 422, "image_rejected")  # a lying header
    await post(b"\x89PNG\r\n\x1a\n" + bytes(300), "image/png", 422, "image_rejected")  # PNG magic, nothing else
    bomb = await post((root / "broken" / "bomb.png").read_bytes(), "image/png", 422, "image_rejected")
    assert "bomb" in bomb["message"]
    await post((root / "broken" / "truncated.jpg").read_bytes(), "image/jpeg", 422, "image_rejected")
    big = await post(bytes(300_000), "image/jpeg", 413, "payload_too_large")
    assert big["max_bytes"] == 200_000
    await post(json.dumps({"image": "@@not base64@@"}), "application/json", 400, "invalid_request")
    await post(json.dumps({"image": "aGk=", "shape": "round"}), "application/json", 400, "invalid_request")
    await post(b"hello", "text/plain", 400, "invalid_request")
    await post(b"", "image/jpeg", 400, "invalid_request")
    # the requests counter went down by one per upload, errors included
    first = (await client.get("/api/books")).headers["RateLimit"]
    await post(b"junk", "image/jpeg", 422, "image_rejected")
    second = (await client.get("/api/books")).headers["RateLimit"]
    assert _remaining(first) - _remaining(second) == 2


def _remaining(header: str) -> int:
    return int(header.split('"requests";r=')[1].split(";")[0])


async def test_a_page_is_filled_past_results_withdrawn_since_the_search_snapshot(client: TestClient) -> None:
    """An illustration removed after the search snapshot ranked it is not shown, and the page is filled with the
    next results instead of coming back short (a write on the app's own connection leaves the snapshot as it was,
    the window a removal falls in while the snapshot rebuilds)."""
    ranked = {"q": "furnace", "limit": 3, "maxPerBook": 1000}
    before = await get(client, "/api/gallery", **ranked)
    listing = await get(client, "/api/gallery", limit=3, maxPerBook=1000)

    def remove(catalog: Any) -> None:
        with catalog.transaction() as conn:
            remove_illustration(conn, before["items"][0]["id"])
            remove_illustration(conn, listing["items"][1]["id"])

    await client.app[SERVICES].db.call(remove)  # on the catalog's own thread, as the app's calls
    after = await get(client, "/api/gallery", **ranked)
    assert len(after["items"]) == 3 and after["has_more"]
    assert [i["id"] for i in after["items"]][:2] == [i["id"] for i in before["items"]][1:]
    page = await get(client, "/api/gallery", limit=3, maxPerBook=1000)
    shown = [i["id"] for i in page["items"]]
    assert len(shown) == 3 and listing["items"][1]["id"] not in shown and page["next_cursor"] == shown[-1]
    rest = await get(client, "/api/gallery", limit=3, maxPerBook=1000, cursor=page["next_cursor"])
    assert not set(shown) & {i["id"] for i in rest["items"]}


async def test_a_feature_index_that_will_not_load_is_not_a_500(
    make_client: MakeClient, data_dir: Path, demo_library: dict[str, Any]
) -> None:
    """A feature index cut short on disk (a copy interrupted, a disk error) is logged and not tried again: search by
    image answers, finding nothing, instead of a 500 and a fresh load at every search."""
    folder = data_dir / "featureindex"
    pointer = json.loads((folder / "current.json").read_text())
    faiss_file = folder / f"index-{pointer['digest']}.faiss"
    faiss_file.write_bytes(faiss_file.read_bytes()[:100])
    client = await make_client(search_wait=120)
    root, printings = _printings(demo_library)
    x0, y0, x1, y1 = printings[0]["box"]
    picture = _jpeg(_page(root, printings[0]).crop((x0, y0, x1, y1)))
    for _ in range(2):
        response = await client.post(
            "/api/gallery/search-by-image", data=picture, headers={"Content-Type": "image/jpeg"}
        )
        body = await response.json()
        assert response.status == 200 and body["same_block"] == [], body


async def test_a_book_another_process_writes_is_found_and_a_removed_picture_gone_without_a_whole_read(
    client: TestClient, data_dir: Path
) -> None:
    """The node follows writes by another process (as ingest and the CLI are) book by book: its gallery table is
    read whole once, then updated for the books written (``search.gallery_table`` in /health says how often each)."""
    from tests.catalog.test_catalog import book, illus, write_book

    await get(client, "/api/gallery", q="salamander")  # the table in service, read whole
    start = (await get(client, "/health"))["search"]["gallery_table"]
    musaeum = book(0x5A1, title="Musaeum Hermeticum", year=1625)
    pictures = [illus(musaeum["id"], n, 0, f"A zqsalamander in the fire, plate {n}") for n in (1, 2)]
    mine = {"q": "zqsalamander", "book_id": musaeum["id"]}
    catalog = Catalog(data_dir / "catalog.sqlite3")  # an operator's connection, as ingest would open
    try:
        write_book(catalog, musaeum, {1: [pictures[0]], 2: [pictures[1]]})
        found = await get(client, "/api/gallery", **mine)
        assert {i["id"] for i in found["items"]} == {p["id"] for p in pictures}
        assert all(i["book_title"] == "Musaeum Hermeticum" for i in found["items"])
        with catalog.transaction() as conn:
            remove_illustration(conn, pictures[0]["id"])
    finally:
        catalog.close()
    found = await get(client, "/api/gallery", **mine)
    assert [i["id"] for i in found["items"]] == [pictures[1]["id"]] and found["total"] == 1
    table = (await get(client, "/health"))["search"]["gallery_table"]
    assert table["read_whole"] == start["read_whole"] == 1, (start, table)
    assert table["updated_by_book"] == start["updated_by_book"] + 2
    assert table["illustrations"] == start["illustrations"] + 2  # a removed one stays in the table, not live
