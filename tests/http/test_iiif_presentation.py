"""IIIF Presentation 3: book manifests and curated collections, validated with the iiif-prezi3 models."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from aiohttp.test_utils import TestClient

from tests.parts import import_part

prezi3 = import_part("iiif_prezi3", "scripts/bootstrap.sh installs iiif-prezi3")

RTL = "demo-sefer-maarekhet-ha-kokhavim"


async def test_book_links_its_manifest_and_the_manifest_validates(client: TestClient) -> None:
    book = await (await client.get("/api/books/demo-speculum-fornacum")).json()
    assert book["iiif_manifest"].endswith(f"/iiif/3/manifest/{book['id']}")
    resp = await client.get(f"/iiif/3/manifest/{book['id']}", headers={"Accept": "application/ld+json"})
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("application/ld+json")
    assert resp.headers["Access-Control-Allow-Origin"] == "*"
    doc = await resp.json()
    prezi3.Manifest.model_validate(doc)  # raises on a document that breaks the Presentation 3 model
    assert doc["rights"] == book["license"]
    assert "Digitized by " + book["attribution"]["institution"] in doc["requiredStatement"]["value"]["en"][0]
    assert "viewingDirection" not in doc  # left-to-right is the default
    assert len(doc["items"]) == len(book["pages"])
    canvas = doc["items"][0]
    body = canvas["items"][0]["items"][0]["body"]
    service = body["service"][0]
    info = await (await client.get(service["id"].split("/iiif/3/", 1)[1].join(["/iiif/3/", "/info.json"]))).json()
    assert (info["width"], info["height"]) == (canvas["width"], canvas["height"]) == (body["width"], body["height"])
    thumb = await client.get(urlsplit(doc["thumbnail"][0]["id"]).path)
    assert thumb.status == 200 and thumb.headers["Content-Type"] == "image/jpeg"


async def test_rtl_books_say_so_and_pages_without_images_stay_honest(client: TestClient) -> None:
    doc = await (await client.get(f"/iiif/3/manifest/{RTL}")).json()
    prezi3.Manifest.model_validate(doc)
    assert doc["viewingDirection"] == "right-to-left"
    library = await (await client.get("/api/books?limit=200")).json()
    for summary in library["items"] if "items" in library else library["books"]:
        book = await (await client.get(f"/api/books/{summary['id']}")).json()
        missing = [p["page"] for p in book["pages"] if p.get("image_unavailable")]
        if not missing:
            continue
        manifest = await (await client.get(f"/iiif/3/manifest/{book['id']}")).json()
        prezi3.Manifest.model_validate(manifest)
        by_label = {c["id"].rsplit("/p", 1)[1]: c for c in manifest["items"]}
        for number in missing:
            canvas = by_label[str(number)]
            assert "items" not in canvas  # nothing painted: no foreign or placeholder image
            assert "no image held" in canvas["label"]["en"][0]
        break
    else:
        pytest.fail("the demo library should have a page without an image")


async def test_collections_are_iiif_collections(client: TestClient) -> None:
    index = await (await client.get("/iiif/3/collections")).json()
    prezi3.Collection.model_validate(index)
    assert index["items"]
    for ref in index["items"]:
        doc = await (await client.get(urlsplit(ref["id"]).path)).json()
        prezi3.Collection.model_validate(doc)
        for item in doc["items"]:
            assert item["type"] == "Manifest"
            manifest = await client.get(urlsplit(item["id"]).path)
            assert manifest.status == 200
    missing = await client.get("/iiif/3/collection/no-such-collection")
    assert missing.status == 404 and (await missing.json())["error"] == "not_found"
    assert (await client.get("/iiif/3/manifest/no-such-book")).status == 404
