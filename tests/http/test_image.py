"""GET /image: marked by default, clean only for full-tier keys, provenance notes for keys, masters never public."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from aiohttp.test_utils import TestClient
from PIL import Image

from colophon import Note
from imagesvc.imaging.xmp import read_xmp
from tests.http.keys import new_key
from tests.imaging.helpers import scan_digest

PAGE = {"book": "demo-speculum-fornacum", "page": "2", "tier": "display"}


def _pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=np.float64)


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a - b) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255**2 / mse)


async def test_default_is_the_marked_public_tier(client: TestClient) -> None:
    book = await (await client.get("/api/books/demo-speculum-fornacum")).json()
    public = await client.get("/img/" + book["pages"][1]["image_display"].split("/img/", 1)[1])
    resp = await client.get("/api/image", params=PAGE)
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "image/jpeg"
    assert await resp.read() == await public.read()
    assert resp.headers["Cache-Control"] == "public, max-age=86400"


async def test_head_and_repeat_deliveries(client: TestClient) -> None:
    got = await client.get("/api/image", params=PAGE)
    body = await got.read()
    head = await client.head("/api/image", params=PAGE)
    assert head.status == 200
    assert head.headers["RateLimit"] == got.headers["RateLimit"].replace("r=59", "r=58")  # no image spent
    assert int(head.headers["Content-Length"]) == len(body) and await head.read() == b""
    assert head.headers["ETag"] == got.headers["ETag"]
    again = await client.get("/api/image", params=PAGE)  # served from memory now: same bytes, same validator
    assert await again.read() == body and again.headers["ETag"] == got.headers["ETag"]
    metrics = await (await client.get("/metrics")).text()
    hits = next(line for line in metrics.splitlines() if line.startswith("imagesvc_hot_objects_hits_total "))
    assert float(hits.split()[1]) >= 2  # the HEAD and the repeat GET


@pytest.mark.parametrize("tier", ["free", "language", "domain"])
async def test_clean_is_refused_for_every_tier_below_full(client: TestClient, data_dir: Path, tier: str) -> None:
    key, _ = new_key(data_dir, tier)
    resp = await client.get("/api/image", params={**PAGE, "clean": "1"}, headers={"Authorization": f"Bearer {key}"})
    body = await resp.json()
    assert resp.status == 403
    assert resp.headers["Content-Type"].startswith("application/json")  # never a marked image in its place
    assert body["error"] == "forbidden"
    assert body["required_tiers"] == ["full", "enterprise"]
    assert "full or enterprise" in body["message"]


async def test_clean_is_refused_for_anonymous_and_signed_in(client: TestClient) -> None:
    import time

    from imagesvc.access.identity import sign_session

    token = sign_session("u1", int(time.time()) + 60, "test-secret")
    for headers in ({}, {"Authorization": f"Bearer {token}"}):
        resp = await client.get("/api/image", params={**PAGE, "clean": "1"}, headers=headers)
        assert resp.status == 403
    quota = await (await client.get("/api/rate_limit")).json()
    assert quota["pools"]["images"]["used"] == 0  # a refusal costs nothing


@pytest.mark.parametrize("tier", ["full", "enterprise"])
async def test_full_tier_keys_get_clean_images_privately(client: TestClient, data_dir: Path, tier: str) -> None:
    key, _ = new_key(data_dir, tier)
    auth = {"Authorization": f"Bearer {key}"}
    clean = await client.get("/api/image", params={**PAGE, "clean": "1"}, headers=auth)
    marked = await client.get("/api/image", params=PAGE, headers=auth)
    assert clean.status == marked.status == 200
    assert clean.headers["Cache-Control"] == "private, no-store"
    a, b = _pixels(await clean.read()), _pixels(await marked.read())
    assert a.shape == b.shape  # this page has margins: its mark sits in one
    diff = np.abs(a - b).max(axis=2)
    assert np.median(diff) < 4  # the page itself is the same picture
    assert (diff > 60).sum() > 200  # the mark is only in the marked one


async def test_key_deliveries_carry_a_provenance_note_with_pixels_untouched(client: TestClient, data_dir: Path) -> None:
    key, key_id = new_key(data_dir, "free")
    anonymous = await (await client.get("/api/image", params=PAGE)).read()
    keyed = await (await client.get("/api/image", params=PAGE, headers={"Authorization": f"Bearer {key}"})).read()
    assert read_xmp(anonymous) is None
    xmp = read_xmp(keyed)
    assert xmp is not None
    assert key_id in xmp
    assert "https://library.example/book/demo-speculum-fornacum?page=2" in xmp
    note_text = xmp.split("<imagesvc:note>")[1].split("</imagesvc:note>")[0]
    note = Note.parse(note_text)
    assert note.key_ref == key_id
    assert note.title.startswith("Speculum")
    assert scan_digest(keyed) == scan_digest(anonymous)  # entropy-coded data byte-identical: no re-encode
    assert np.array_equal(_pixels(keyed), _pixels(anonymous))


async def test_illustration_images(client: TestClient) -> None:
    book = await (await client.get("/api/books/demo-speculum-fornacum")).json()
    resp = await client.get("/api/image", params={"illustration": f"{book['id']}-1:0", "tier": "thumb"})
    assert resp.status == 200
    listed = (await (await client.get(f"/api/gallery/images/{book['id']}-1:0")).json())["sizes"]["thumb"]
    got = Image.open(io.BytesIO(await resp.read())).size
    assert got == (listed["width"], listed["height"])  # as listed: a mark strip below the crop included
    assert got[0] <= 300 and got[1] <= 300 * 1.2  # the crop's longest side is 300 px, the strip a band below it
    resp = await client.get("/api/image", params={"illustration": f"{book['id']}-1:9"})
    assert resp.status == 404


@pytest.mark.parametrize(
    ("params", "status"),
    [
        ({}, 400),
        ({"book": "demo-speculum-fornacum"}, 400),
        ({**PAGE, "tier": "huge"}, 400),
        ({**PAGE, "page": "two"}, 400),
        ({**PAGE, "clean": "maybe"}, 400),
        ({"book": "nope", "page": "1"}, 404),
        ({**PAGE, "page": "999"}, 404),
        ({"book": "demo-traite-des-mines", "page": "7"}, 404),
    ],
)
async def test_bad_requests_are_clear_json(client: TestClient, params: dict[str, str], status: int) -> None:
    resp = await client.get("/api/image", params=params)
    body = await resp.json()
    assert resp.status == status
    assert body["message"] and body["recovery"]
