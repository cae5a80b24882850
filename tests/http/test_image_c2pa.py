"""Content Credentials on what /image delivers: public tiers signed at ingest, every keyed delivery signed per request
after its XMP note, clean copies saying so; each file read back with c2pa's own Reader."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
from pathlib import Path

from aiohttp.test_utils import TestClient

from imagesvc.catalog import Catalog
from imagesvc.imaging.xmp import read_xmp, strip_c2pa
from imagesvc.provenance.manifests import DELIVERY_LABEL, SOURCE_LABEL
from imagesvc.provenance.sign import Credentials, read_credentials
from imagesvc.web.app_keys import SERVICES
from tests.http.conftest import MakeClient
from tests.http.keys import new_key

PAGE = {"book": "demo-speculum-fornacum", "page": "2", "tier": "display"}
CITATION = "https://library.example/book/demo-speculum-fornacum?page=2"


def _page_row(data_dir: Path) -> dict:
    catalog = Catalog(data_dir / "catalog.sqlite3")
    try:
        book = catalog.find_book(PAGE["book"])
        page = catalog.page(book["id"], 2)
        return {**dict(book), **dict(page), "renditions": catalog.renditions([page["id"]])[page["id"]]}
    finally:
        catalog.close()


def _trusted(data: bytes, data_dir: Path) -> Credentials:
    found = read_credentials(data, data_dir / "c2pa" / "root.pem")
    assert found.state == "Trusted", found.failures
    return found


def _actions(found: Credentials) -> list[dict]:
    return found.assertion("c2pa.actions.v2")["actions"]


async def test_public_tiers_are_signed_at_ingest(client: TestClient, data_dir: Path) -> None:
    body = await (await client.get("/api/image", params=PAGE)).read()
    found = _trusted(body, data_dir)
    row = _page_row(data_dir)
    (master,) = found.manifest["ingredients"]
    assert master["relationship"] == "parentOf"
    assert master["instance_id"] == f"urn:sha256:{row['master_sha256']}"  # by hash: no master bytes
    assert "thumbnail" not in master and "thumbnail" not in found.manifest
    assert body == (data_dir / "store" / row["renditions"]["display"]["public_key"]).read_bytes()  # signed once
    assert [a["action"] for a in _actions(found)] == ["c2pa.opened", "c2pa.resized", "c2pa.edited"]
    assert CITATION in _actions(found)[2]["description"]
    source = found.assertion(SOURCE_LABEL)
    assert source["citation_url"] == CITATION
    assert source["digitized_by"] == row["institution"]
    assert source["edition"].startswith(row["title"])
    assert found.assertion(DELIVERY_LABEL) is None  # nobody in particular asked for it


async def test_keyed_delivery_is_signed_after_its_note(client: TestClient, data_dir: Path) -> None:
    key, key_id = new_key(data_dir, "free")
    body = await (await client.get("/api/image", params=PAGE, headers={"Authorization": f"Bearer {key}"})).read()
    found = _trusted(body, data_dir)
    assert key_id in read_xmp(body)  # the note went in before the signature, and the signature covers it
    assert found.assertion(DELIVERY_LABEL) == {
        "key_ref": key_id,
        "date": dt.datetime.now(dt.UTC).date().isoformat(),
        "pool": "images",
        "visible_mark": True,
    }
    stored = (data_dir / "store" / _page_row(data_dir)["renditions"]["display"]["public_key"]).read_bytes()
    parent = hashlib.sha256(strip_c2pa(stored)).hexdigest()  # the stored tier's image, without its ingest manifest
    assert found.manifest["ingredients"][0]["instance_id"] == f"urn:sha256:{parent}"
    assert found.assertion(SOURCE_LABEL)["citation_url"] == CITATION
    assert key not in body.decode("latin-1")  # the secret never goes into the file


async def test_signed_deliveries_vary_so_their_etag_is_weak(client: TestClient, data_dir: Path) -> None:
    """A strong ETag promises identical bytes; two signed deliveries of one page to one key differ (the manifest's
    salt), so the tag is weak, and it still answers If-None-Match with a 304 that spends nothing."""
    key, _ = new_key(data_dir, "free")
    auth = {"Authorization": f"Bearer {key}"}
    one = await client.get("/api/image", params=PAGE, headers=auth)
    two = await client.get("/api/image", params=PAGE, headers=auth)
    assert await one.read() != await two.read()
    assert one.headers["ETag"].startswith('W/"') and one.headers["ETag"] == two.headers["ETag"]
    cached = await client.get("/api/image", params=PAGE, headers={**auth, "If-None-Match": one.headers["ETag"]})
    assert cached.status == 304
    public = await client.get("/api/image", params=PAGE)  # sent as stored: a strong tag
    assert public.headers["ETag"].startswith('"')


async def test_clean_copy_says_no_mark_and_to_whom(client: TestClient, data_dir: Path) -> None:
    key, key_id = new_key(data_dir, "full")
    resp = await client.get("/api/image", params={**PAGE, "clean": "1"}, headers={"Authorization": f"Bearer {key}"})
    found = _trusted(await resp.read(), data_dir)
    delivery = found.assertion(DELIVERY_LABEL)
    assert delivery["visible_mark"] is False and delivery["key_ref"] == key_id
    published = _actions(found)[-1]
    assert published["action"] == "c2pa.published"
    assert "no visible mark applied" in published["description"] and key_id in published["description"]
    assert not any("mark drawn" in a.get("description", "") for a in _actions(found))


async def test_an_object_rewritten_in_place_is_signed_over_its_new_bytes(client: TestClient, data_dir: Path) -> None:
    """Clean copies live at fixed keys that a re-ingest or a rebake writes over. The hash of a stored object's
    unchanging segments is kept per object key and the store's ETag, so a delivery after the rewrite binds the new
    bytes: both deliveries read Trusted, and they differ."""
    key, _ = new_key(data_dir, "full")
    headers, params = {"Authorization": f"Bearer {key}"}, {**PAGE, "clean": "1"}
    first = await (await client.get("/api/image", params=params, headers=headers)).read()
    _trusted(first, data_dir)
    tiers = _page_row(data_dir)["renditions"]
    store = client.app[SERVICES].store
    other = (await store.get(tiers["thumb"]["clean_key"])).data
    await store.put(tiers["display"]["clean_key"], other, content_type="image/jpeg")
    second = await (await client.get("/api/image", params=params, headers=headers)).read()
    _trusted(second, data_dir)
    assert strip_c2pa(second) != strip_c2pa(first)


async def test_concurrent_deliveries_each_name_their_own_key(client: TestClient, data_dir: Path) -> None:
    """Deliveries signed at the same time in several threads (each with its own signer) never swap notes or
    manifests: every file is Trusted and its XMP note and delivery assertion name the key that asked for it."""
    keys = [new_key(data_dir, tier) for tier in ("free", "free", "enterprise", "full")]

    async def fetch(key: str, illustration: bool) -> bytes:
        params = PAGE if not illustration else {**PAGE, "tier": "thumb"}
        resp = await client.get("/api/image", params=params, headers={"Authorization": f"Bearer {key}"})
        assert resp.status == 200
        return await resp.read()

    jobs = [(key, key_id, i % 2 == 1) for i, (key, key_id) in enumerate(keys * 3)]
    bodies = await asyncio.gather(*(fetch(key, thumb) for key, _, thumb in jobs))
    for (_, key_id, _), body in zip(jobs, bodies, strict=True):
        found = _trusted(body, data_dir)
        assert found.assertion(DELIVERY_LABEL)["key_ref"] == key_id
        assert key_id in read_xmp(body)
        assert all(other not in read_xmp(body) for _, other in keys if other != key_id)


async def test_a_changed_byte_reads_invalid(client: TestClient, data_dir: Path) -> None:
    key, _ = new_key(data_dir, "full")
    body = bytearray(
        await (await client.get("/api/image", params=PAGE, headers={"Authorization": f"Bearer {key}"})).read()
    )
    body[-2000] ^= 0x01  # one bit of the image data
    assert read_credentials(bytes(body), data_dir / "c2pa" / "root.pem").state == "Invalid"
    spliced = bytes(body[:2]) + b"\xff\xfe\x00\x05late" + bytes(body[2:])  # a comment written after signing
    assert read_credentials(spliced, data_dir / "c2pa" / "root.pem").state == "Invalid"


async def test_signing_off_delivers_unsigned(make_client: MakeClient, data_dir: Path) -> None:
    client = await make_client(c2pa_sign=False)
    key, key_id = new_key(data_dir, "full")
    body = await (await client.get("/api/image", params=PAGE, headers={"Authorization": f"Bearer {key}"})).read()
    assert key_id in read_xmp(body)
    # The ingest manifest would no longer match once the note is in: it is dropped rather than sent broken.
    assert read_credentials(body).state is None


async def test_half_configured_operator_keys_are_a_clear_503(make_client: MakeClient, data_dir: Path) -> None:
    client = await make_client(c2pa_cert_chain=str(data_dir / "c2pa" / "chain.pem"))
    key, _ = new_key(data_dir, "full")
    resp = await client.get("/api/image", params=PAGE, headers={"Authorization": f"Bearer {key}"})
    body = await resp.json()
    assert resp.status == 503 and body["error"] == "unavailable"
    assert "IMAGESVC_C2PA_PRIVATE_KEY" in body["message"]
    anonymous = await client.get("/api/image", params=PAGE)  # the public tier was signed at ingest: still served
    assert anonymous.status == 200
