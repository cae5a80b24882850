"""The bulk dataset: GET /dataset/images (keyset-paged listing of what a key may fetch, with sizes and digests of
the stored objects) and GET /dataset/changes (IIIF Change Discovery 1.0 over the book change log)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from imagesvc.catalog import Catalog
from imagesvc.catalog.writes import withdraw_book
from imagesvc.imaging.xmp import strip_c2pa
from tests.http.keys import new_key
from tests.library import SITE


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_the_listing_pages_by_cursor_through_every_page_with_digests_of_the_stored_objects(
    client: TestClient, data_dir: Path
) -> None:
    key, _ = new_key(data_dir, "full")
    seen, cursor = [], None
    while True:
        params = {"limit": "5", **({"cursor": cursor} if cursor else {})}
        body = await (await client.get("/api/dataset/images", params=params, headers=_auth(key))).json()
        seen += body["items"]
        cursor = body["next_cursor"]
        if not body["has_more"]:
            assert cursor is None
            break
    assert len(seen) == body["total"] == len({(i["book_id"], i["page"]) for i in seen})  # each page once
    assert [(i["book_id"], i["page"]) for i in seen] == sorted((i["book_id"], i["page"]) for i in seen)
    missing = [i for i in seen if i.get("image_unavailable")]
    assert [(i["slug"], i["page"]) for i in missing if i["slug"] == "demo-traite-des-mines"] == [
        ("demo-traite-des-mines", 7)
    ]
    page = next(i for i in seen if i["slug"] == "demo-speculum-fornacum" and i["page"] == 2)
    assert page["changed_at"] and page["change"] >= 1
    display = page["tiers"]["display"]
    public = await (await client.get(display["marked"]["url"].split("library.example", 1)[1])).read()
    assert len(public) == display["marked"]["bytes"]
    assert hashlib.sha256(strip_c2pa(public)).hexdigest() == display["marked"]["content_sha256"]
    clean = next((data_dir / "store" / "clean").rglob("*"))  # stored clean copies are listed with their digest
    digests = {t["clean"]["sha256"] for i in seen if "tiers" in i for t in i["tiers"].values()}
    assert page["master"]["sha256"] and page["master"]["bytes"] > 0
    assert any(hashlib.sha256(p.read_bytes()).hexdigest() in digests for p in clean.parent.rglob("*.jpg")), (
        "clean copies' digests are of the stored bytes"
    )


async def test_clean_digests_only_for_keys_that_may_fetch_clean_copies_and_nothing_for_anonymous(
    client: TestClient, data_dir: Path
) -> None:
    key, _ = new_key(data_dir, "free")
    body = await (await client.get("/api/dataset/images?book_id=demo-gart-der-kreuter", headers=_auth(key))).json()
    assert body["total"] == 7 and all("clean" not in t for i in body["items"] for t in i["tiers"].values())
    anonymous = await client.get("/api/dataset/images")
    assert anonymous.status == 401 and (await anonymous.json())["error"] == "unauthorized"
    bad = await client.get("/api/dataset/images?cursor=bm9wZQ", headers=_auth(key))
    assert bad.status == 400 and (await bad.json())["parameter"] == "cursor"


async def test_the_change_feed_is_iiif_change_discovery_and_records_a_withdrawal(
    client: TestClient, data_dir: Path
) -> None:
    key, _ = new_key(data_dir, "free")
    collection = await (await client.get("/api/dataset/changes", headers=_auth(key))).json()
    assert collection["type"] == "OrderedCollection"
    assert collection["@context"] == "http://iiif.io/api/discovery/1/context.json"
    before = collection["totalItems"]
    assert before == 4  # each of the four demo books was created
    catalog = Catalog(data_dir / "catalog.sqlite3")
    try:
        withdrawn = catalog.find_book("demo-gart-der-kreuter")["id"]
        with catalog.transaction() as conn:
            assert withdraw_book(conn, withdrawn)
    finally:
        catalog.close()
    collection = await (await client.get("/api/dataset/changes", headers=_auth(key))).json()
    assert collection["totalItems"] == before + 1
    last = collection["last"]["id"].split("library.example", 1)[1]
    page = await (await client.get(last, headers=_auth(key))).json()
    assert page["type"] == "OrderedCollectionPage" and page["partOf"]["id"] == collection["id"]
    newest = page["orderedItems"][-1]
    assert newest["type"] == "Delete" and newest["object"]["type"] == "Manifest"
    assert newest["object"]["id"] == f"{SITE}/iiif/3/manifest/{withdrawn}"  # the withdrawn book
    assert {a["type"] for a in page["orderedItems"]} <= {"Create", "Update", "Delete"}
    assert (await client.get("/api/dataset/changes?page=999", headers=_auth(key))).status == 404


def _forged(position: object) -> str:
    import base64
    import json

    return base64.urlsafe_b64encode(json.dumps(position).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "position",
    [
        pytest.param(["demo", 10**30], id="huge"),
        pytest.param(["demo", 2**63], id="past-int64"),
        pytest.param(["demo", -(2**63) - 1], id="below-int64"),
        pytest.param(["demo", True], id="bool"),
        pytest.param([None, 1], id="no-book"),
        pytest.param(["demo"], id="short"),
        pytest.param("demo", id="not-a-list"),
    ],
)
async def test_a_forged_cursor_is_a_400_naming_it_on_both_doors(
    client: TestClient, data_dir: Path, position: object
) -> None:
    """A cursor is opaque, but it is the caller's text: one decoded into a page number past what the catalog can
    hold is refused like any other cursor the service did not give out, never a 500."""
    key, _ = new_key(data_dir, "free")
    resp = await client.get("/api/dataset/images", params={"cursor": _forged(position)}, headers=_auth(key))
    body = await resp.json()
    assert (resp.status, body["error"], body["parameter"]) == (400, "invalid_request", "cursor"), body
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "list_dataset_images", "arguments": {"cursor": _forged(position)}}}  # fmt: skip
    result = (await (await client.post("/api/mcp", json=call, headers=_auth(key))).json())["result"]
    assert result["isError"] and result["structuredContent"]["error"] == "invalid_request", result


async def test_changes_in_one_second_have_an_order_a_harvester_resumes_from_without_missing_one(
    client: TestClient, data_dir: Path
) -> None:
    key, _ = new_key(data_dir, "free")
    catalog = Catalog(data_dir / "catalog.sqlite3")
    try:
        with catalog.transaction() as conn:  # two changes in one transaction: one endTime, to the second
            for slug in ("demo-gart-der-kreuter", "demo-traite-des-mines"):
                assert withdraw_book(conn, catalog.find_book(slug)["id"])
    finally:
        catalog.close()
    collection = await (await client.get("/api/dataset/changes", headers=_auth(key))).json()
    last = collection["last"]["id"].split("library.example", 1)[1]
    items = (await (await client.get(last, headers=_auth(key))).json())["orderedItems"]
    first, second = items[-2:]
    assert first["endTime"] == second["endTime"]  # whole seconds: endTime alone cannot order them
    seqs = [a["seq"] for a in items]
    assert seqs == sorted(set(seqs)) and first["seq"] < second["seq"]
    processed = first["seq"]  # a harvester that stopped after the first resumes with the second, by seq
    assert [a for a in items if a["seq"] > processed] == [second]
    listing = await (await client.get("/api/dataset/images?limit=1", headers=_auth(key))).json()
    assert "manifest-sha256.txt" in listing["digests"]["delivered_files"]  # says what each digest is of
    assert set(listing["digests"]) >= {"master.sha256", "tiers.*.marked.content_sha256", "tiers.*.clean.sha256"}
