"""IIIF Image API on pages and illustrations: info.json, image requests, errors, marks, clean entitlement, budgets,
the derivative cache and its 304s."""

from __future__ import annotations

import asyncio
import io
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp.test_utils import TestClient
from PIL import Image

from imagesvc.access import MILLI
from imagesvc.access.identity import sign_session
from imagesvc.catalog import Catalog
from imagesvc.catalog.api_keys import create_key
from imagesvc.iiif.cache import CACHE_PREFIX
from imagesvc.storage.local import LocalStore
from imagesvc.web.app_keys import ACCESS, IIIF
from tests.library import SITE

SLUG = "demo-speculum-fornacum"


def _key(data_dir: Path, tier: str) -> str:
    catalog = Catalog(data_dir / "catalog.sqlite3")
    try:
        return create_key(catalog, tier, f"test {tier}")[0]
    finally:
        catalog.close()


def _rendition(data_dir: Path, owner: str, tier: str) -> dict[str, object]:
    catalog = Catalog(data_dir / "catalog.sqlite3")
    try:
        return catalog.renditions([owner])[owner][tier]
    finally:
        catalog.close()


def _pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=np.float64)


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a - b) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255**2 / mse)


async def _page_id(client: TestClient, number: int = 2) -> str:
    book = await (await client.get(f"/api/books/{SLUG}")).json()
    return f"{book['id']}-{number}"


async def test_info_json_describes_a_level2_service(client: TestClient) -> None:
    page = await _page_id(client)
    resp = await client.get(f"/iiif/3/{page}/info.json")
    info = await resp.json()
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("application/json")
    assert resp.headers["Access-Control-Allow-Origin"] == "*"
    assert info["id"] == f"{SITE}/iiif/3/{page}"  # the configured site URL, not the Host header
    assert (info["type"], info["profile"], info["protocol"]) == ("ImageService3", "level2", "http://iiif.io/api/image")
    assert info["tiles"][0]["width"] == 512 and info["tiles"][0]["scaleFactors"][0] == 1
    assert {"width": info["width"], "height": info["height"]} in info["sizes"]
    assert info["rights"] == "https://creativecommons.org/publicdomain/zero/1.0/"
    assert "mirroring" in info["extraFeatures"] and info["maxArea"] > 0
    ld = await client.get(f"/iiif/3/{page}/info.json", headers={"Accept": "application/ld+json"})
    assert ld.headers["Content-Type"] == 'application/ld+json;profile="http://iiif.io/api/image/3/context.json"'


async def test_base_uri_redirects_and_unknown_ids_are_404(client: TestClient) -> None:
    page = await _page_id(client)
    resp = await client.get(f"/iiif/3/{page}", allow_redirects=False)
    assert resp.status == 303
    assert resp.headers["Location"].endswith(f"/iiif/3/{page}/info.json")
    for bad in ("nosuchbook-1", "nothing", f"{page}:99", page.rsplit("-", 1)[0] + "-999"):
        resp = await client.get(f"/iiif/3/{bad}/full/max/0/default.jpg")
        assert resp.status == 404, bad
        assert (await resp.json())["error"] == "not_found"


@pytest.mark.parametrize(
    "path",
    [
        "full/max/0/default.gif",
        "full/max/0/fancy.jpg",
        "full/max/45/default.jpg",
        "full/full/0/default.jpg",
        "0,0,0,10/max/0/default.jpg",
        "99999,0,10,10/max/0/default.jpg",
        "full/0,/0/default.jpg",
        "0,0,100,100/200,/0/default.jpg",
        "full/^99999,/0/default.jpg",
        "pct:x/max/0/default.jpg",
    ],
)
async def test_bad_parameters_are_400_as_json(client: TestClient, path: str) -> None:
    resp = await client.get(f"/iiif/3/{await _page_id(client)}/{path}")
    assert resp.status == 400
    assert (await resp.json())["error"] == "invalid_request"


async def test_regions_sizes_rotations_qualities_and_formats(client: TestClient) -> None:
    page = await _page_id(client)
    info = await (await client.get(f"/iiif/3/{page}/info.json")).json()
    w, h = info["width"], info["height"]
    assert h > w  # the demo pages are portrait
    # pct:50,50,50,50 is the lower right quarter; !64,64 fits it into a 64 px box, so its height is 64
    qw, qh = min(round(w / 2), w - round(w / 2)), min(round(h / 2), h - round(h / 2))
    cases = {
        "full/max/0/default.jpg": ((w, h), "JPEG", "RGB"),
        "square/100,/0/default.png": ((100, 100), "PNG", "RGB"),
        "10,20,300,200/150,/90/gray.webp": ((100, 150), "WEBP", "RGB"),  # WebP stores no gray mode: see below
        "pct:50,50,50,50/!64,64/!180/bitonal.png": ((int(qw * 64 / qh + 1e-9), 64), "PNG", "1"),
        "0,0,100,100/^200,200/270/color.jpg": ((200, 200), "JPEG", "RGB"),
        "full/pct:10/0/default.jpg": ((round(w / 10), round(h / 10)), "JPEG", "RGB"),
    }
    for path, (size, fmt, mode) in cases.items():
        resp = await client.get(f"/iiif/3/{page}/{path}")
        assert resp.status == 200, (path, await resp.text())
        img = Image.open(io.BytesIO(await resp.read()))
        assert (img.format, img.mode, img.size) == (fmt, mode, size), path
        if "gray" in path:  # gray quality in a format without a gray mode: every pixel has R = G = B
            rgb = np.asarray(img, dtype=np.int16)
            assert np.abs(rgb[..., 0] - rgb[..., 1]).max() <= 2 and np.abs(rgb[..., 1] - rgb[..., 2]).max() <= 2
            color = await client.get(f"/iiif/3/{page}/{path.replace('gray.webp', 'default.png')}")
            luma = np.asarray(Image.open(io.BytesIO(await color.read())).convert("L"), dtype=np.float64)
            assert _psnr(rgb[..., 1].astype(np.float64), luma) > 30  # the same picture, in gray


async def test_mirroring_flips_the_picture(client: TestClient) -> None:
    page = await _page_id(client)
    plain = _pixels(await (await client.get(f"/iiif/3/{page}/0,0,400,300/max/0/default.png")).read())
    mirrored = _pixels(await (await client.get(f"/iiif/3/{page}/0,0,400,300/max/!0/default.png")).read())
    assert _psnr(plain[:, ::-1], mirrored) > 40


async def test_illustrations_have_iiif_services(client: TestClient) -> None:
    items = (await (await client.get(f"/api/books/{SLUG}/images")).json())["items"]
    ident = items[0]["id"]
    assert ident == f"{items[0]['page_id']}:{items[0]['index']}"  # the IIIF id is the illustration id
    resp = await client.get(f"/iiif/3/{ident}/full/!200,200/0/default.jpg")
    assert resp.status == 200
    assert max(Image.open(io.BytesIO(await resp.read())).size) == 200


FORMS = [
    "full/max/0/default.jpg",
    "full/max/0/default.png",
    "full/max/0/color.webp",
    "full/max/!0/default.jpg",
    "full/max/180/default.jpg",
    "full/1000,/0/default.jpg",
    "full/!800,800/0/gray.png",
    "pct:MARK/max/0/default.png",  # a region around the mark, wherever the page's content left room for it
]


@pytest.mark.parametrize("path", FORMS)
async def test_no_iiif_form_yields_clean_pixels_without_a_full_key(
    client: TestClient, data_dir: Path, path: str
) -> None:
    """Every form is cut from the marked tiers: against the same derivative computed from the clean copy, the body
    of the picture matches closely while the mark (in a margin of this page) clearly does not."""
    page = await _page_id(client)
    free = _key(data_dir, "domain")
    full = _rendition(data_dir, page, "full")
    store = LocalStore(data_dir / "store")
    clean_full = Image.open(store.path_for(str(full["clean_key"]))).convert("RGB")
    marked_full = Image.open(store.path_for(str(full["public_key"]))).convert("RGB")
    assert marked_full.size == clean_full.size  # the demo pages have margins: the mark sits in one
    rows, cols = np.nonzero(
        np.abs(np.asarray(marked_full, np.int16) - np.asarray(clean_full, np.int16)).max(axis=2) > 60
    )
    parts = path.split("/")
    if parts[0] == "pct:MARK":  # the mark's box and as much again round it
        w, h = clean_full.size
        left, top = max(0, cols.min() - (cols.max() - cols.min()) // 2), max(0, rows.min() - (rows.max() - rows.min()))
        right, bottom = (
            min(w, cols.max() + (cols.max() - cols.min()) // 2),
            min(h, rows.max() + (rows.max() - rows.min())),
        )
        box = (100 * left / w, 100 * top / h, 100 * (right - left) / w, 100 * (bottom - top) / h)
        parts[0] = "pct:" + ",".join(f"{v:.2f}" for v in box)
        path = "/".join(parts)
        clean_full = clean_full.crop((left, top, right, bottom))
    for headers in ({}, {"Authorization": f"Bearer {free}"}):
        refused = await client.get(f"/iiif/3/{page}/{path}?clean=1", headers=headers)
        assert refused.status == 403
        assert (await refused.json())["error"] == "forbidden"
        resp = await client.get(f"/iiif/3/{page}/{path}", headers=headers)
        assert resp.status == 200
        got = Image.open(io.BytesIO(await resp.read())).convert("RGB")
        ref = clean_full.resize(got.size, Image.Resampling.LANCZOS)
        if "!" in parts[2]:
            ref = ref.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        if "180" in parts[2]:
            ref = ref.transpose(Image.Transpose.ROTATE_180)
        if "gray" in path:
            ref = ref.convert("L").convert("RGB")
        diff = np.abs(np.asarray(got, dtype=np.float64) - np.asarray(ref, dtype=np.float64)).max(axis=2)
        body, mark = float(np.median(diff)), int((diff > 60).sum())
        assert body < 6 and mark > 40, (path, body, mark)


async def test_full_tier_keys_get_clean_iiif_privately(client: TestClient, data_dir: Path) -> None:
    page = await _page_id(client)
    key = _key(data_dir, "full")
    auth = {"Authorization": f"Bearer {key}"}
    resp = await client.get(f"/iiif/3/{page}/full/!500,500/0/default.png?clean=1", headers=auth)
    assert resp.status == 200
    assert resp.headers["Cache-Control"] == "private, no-store"
    got = _pixels(await resp.read())
    full = _rendition(data_dir, page, "full")
    clean = Image.open(LocalStore(data_dir / "store").path_for(str(full["clean_key"]))).convert("RGB")
    ref = np.asarray(clean.resize((got.shape[1], got.shape[0]), Image.Resampling.LANCZOS), dtype=np.float64)
    assert _psnr(got, ref) > 35
    marked = await client.get(f"/iiif/3/{page}/full/!500,500/0/default.png", headers=auth)
    assert resp.headers["ETag"] != marked.headers["ETag"]


async def test_budget_is_charged_by_delivered_area_and_304_is_free(client: TestClient) -> None:
    """Each output costs its area's exact share of a 2000 x 2000 display image, in thousandths (docs/iiif.md)."""
    page = await _page_id(client)

    async def used() -> tuple[int, float]:
        pool = (await (await client.get("/api/rate_limit")).json())["pools"]["images"]
        return pool["used"], pool["used_exact"]

    info = await client.get(f"/iiif/3/{page}/info.json")
    assert info.status == 200 and info.headers["RateLimit"] == '"images";r=500'
    assert await used() == (0, 0)  # info.json delivers no pixels
    width, height = (await info.json())["width"], (await info.json())["height"]
    big = await client.get(f"/iiif/3/{page}/full/^!4000,4000/0/default.jpg")
    assert big.status == 200
    w, h = Image.open(io.BytesIO(await big.read())).size
    assert max(w, h) == 4000
    spent = -(-w * h * 1000 // 4_000_000)  # thousandths, rounded up
    assert await used() == (-(-spent // 1000), spent / 1000)
    assert big.headers["RateLimit"] == f'"images";r={(500_000 - spent) // 1000}'
    tiles = 0
    for x in range(0, min(width - 256, 2048), 256):
        for y in range(0, min(height - 256, 1024), 256):
            resp = await client.get(f"/iiif/3/{page}/{x},{y},256,256/256,/0/default.jpg")
            assert resp.status == 200
            tiles += 1
    spent += tiles * 17  # 256 x 256 = 16.384 thousandths, rounded up: no tile is free
    assert tiles >= 16 and (await used())[1] == spent / 1000
    again = await client.get(
        f"/iiif/3/{page}/full/^!4000,4000/0/default.jpg", headers={"If-None-Match": big.headers["ETag"]}
    )
    assert again.status == 304
    assert again.headers["RateLimit"] == f'"images";r={(500_000 - spent) // 1000}'
    assert (await used())[1] == spent / 1000  # the 304 cost nothing


async def test_derivatives_are_cached_privately_and_bounded(make_client: object, data_dir: Path) -> None:
    cap = 600_000
    client = await make_client(iiif_cache_bytes=cap)  # type: ignore[operator]
    page = await _page_id(client)
    first = await client.get(f"/iiif/3/{page}/full/600,/0/default.jpg")
    second = await client.get(f"/iiif/3/{page}/full/600,/0/default.jpg")
    body = await first.read()
    assert first.headers["ETag"] == second.headers["ETag"] and body == await second.read()
    store = LocalStore(data_dir / "store")
    cached = [info async for info in store.list(CACHE_PREFIX)]
    assert len(cached) == 1 and cached[0].size == len(body)
    written = len(body)
    for width in range(300, 1300, 100):
        resp = await client.get(f"/iiif/3/{page}/full/{width},/0/default.jpg")
        assert resp.status == 200
        written += len(await resp.read())
    await client.server.app[IIIF].cache.settled()  # the sweep runs beside the requests, not in them
    total = sum([info.size async for info in store.list(CACHE_PREFIX)])
    assert written > cap  # so the bound had to evict
    assert 0 < total <= cap + cap // 8 + cap // 4
    public = await client.get(f"/img/{cached[0].key}")
    assert public.status == 404  # the cache lives outside the public prefix


async def test_deep_zoom_is_not_held_to_the_request_limit_but_to_the_image_budget(client: TestClient) -> None:
    """An anonymous viewer may fetch far more than 60 tiles an hour; each costs image budget by its area."""
    book = await (await client.get("/api/books/demo-traite-des-mines")).json()
    identifier = f"{book['id']}-2"  # the 4200 px page
    statuses = []
    for i in range(80):  # 80 distinct 1024 x 1024 tiles inside the ~2950 x 4200 page
        x, y = i * 20, (i % 3) * 1024
        resp = await client.get(f"/iiif/3/{identifier}/{x},{y},1024,1024/max/0/default.jpg")
        statuses.append(resp.status)
    assert statuses == [200] * 80
    pool = (await (await client.get("/api/rate_limit")).json())["pools"]["images"]
    # Each 1024 x 1024 tile is 1,048,576 / 4,000,000 of a display image: 263 thousandths (rounded up), exactly.
    assert pool["used_exact"] == 80 * 263 / 1000
    assert (pool["used"], pool["remaining"]) == (22, 478)  # whole units: what is left, rounded down
    assert (await client.get("/api/books")).status == 200  # and the request limit was not spent by the tiles


SMALL_OUTPUTS = [
    "0,0,512,512/max/0/default.jpg",  # a deep-zoom tile
    "512,512,512,512/256,/0/default.jpg",  # a tile of a zoomed-out level
    "100,100,90,90/max/0/default.png",  # a crop
    "full/!90,90/0/default.jpg",  # a small size
    "full/!90,90/0/gray.webp",  # other qualities and formats
    "square/64,/90/bitonal.png",
]


async def _spend(client: TestClient, subject: str, units: int, limit: int) -> None:
    """Spend ``units`` (or all that is left, if less) of the subject's image pool, as earlier traffic would."""
    access = client.server.app[ACCESS]
    held = await access.reserve(subject, "images", units * MILLI, limit * MILLI, allow_partial=True)
    assert await access.commit(held)


@pytest.mark.parametrize("caller", ["anonymous", "free"])
async def test_a_spent_pool_refuses_every_priced_output(client: TestClient, data_dir: Path, caller: str) -> None:
    """Once the image pool is spent no IIIF output is delivered, however small, on GET or HEAD; info.json (no
    pixels) still answers and says r=0. Nothing tells a caller in advance which requests are cheap."""
    page = await _page_id(client)
    headers: dict[str, str] = {}
    subject, limit = "ip:127.0.0.1", 500
    if caller == "free":
        catalog = Catalog(data_dir / "catalog.sqlite3")
        try:
            key, record = create_key(catalog, "free", "spent")
        finally:
            catalog.close()
        headers, subject, limit = {"Authorization": f"Bearer {key}"}, f"key:{record.id}", 2000
    assert (await client.get(f"/iiif/3/{page}/{SMALL_OUTPUTS[0]}", headers=headers)).status == 200
    await _spend(client, subject, limit - 1, limit)  # with the tile above, less than one whole unit is left
    info = await client.get(f"/iiif/3/{page}/info.json", headers=headers)
    assert info.status == 200 and info.headers["RateLimit"].startswith('"images";r=0;t=')
    assert (await client.get(f"/iiif/3/{page}/{SMALL_OUTPUTS[1]}", headers=headers)).status == 200  # a fraction fits
    await _spend(client, subject, 1, limit)  # the pool is now spent to the last thousandth
    for path in SMALL_OUTPUTS:
        for method in ("GET", "HEAD"):
            resp = await client.request(method, f"/iiif/3/{page}/{path}", headers=headers)
            assert resp.status == 429, (method, path)
            assert resp.content_type == "application/json" and int(resp.headers["Retry-After"]) > 0
            if method == "GET":
                body = await resp.json()
                assert (body["error"], body["pool"], body["used"], body["limit"]) == (
                    "rate_limited",
                    "images",
                    limit,
                    limit,
                )


async def test_less_than_a_whole_unit_left_refuses_a_whole_image_but_not_a_tile(client: TestClient) -> None:
    page = await _page_id(client)
    access = client.server.app[ACCESS]
    await access.commit(await access.reserve("ip:127.0.0.1", "images", 499_900, 500_000))  # 0.1 of a unit left
    refused = await client.get("/api/image", params={"book": SLUG, "page": "2", "tier": "thumb"})
    assert refused.status == 429 and refused.headers["RateLimit"].startswith('"images";r=0;t=')
    assert (await client.get(f"/iiif/3/{page}/0,0,512,512/max/0/default.jpg")).status == 200  # 66 thousandths
    assert (await client.get(f"/iiif/3/{page}/512,0,512,512/max/0/default.jpg")).status == 429  # 34 left


async def test_iiif_deliveries_are_in_the_usage_meter(client: TestClient, data_dir: Path) -> None:
    page = await _page_id(client)
    key = _key(data_dir, "free")
    auth = {"Authorization": f"Bearer {key}"}
    for x in range(0, 1536, 512):  # three whole tiles inside the page
        assert (await client.get(f"/iiif/3/{page}/{x},0,512,512/max/0/default.jpg", headers=auth)).status == 200
    assert (await client.head(f"/iiif/3/{page}/0,512,512,512/max/0/default.jpg", headers=auth)).status == 200
    assert (await client.get(f"/iiif/3/{page}/info.json", headers=auth)).status == 200
    rows = (await (await client.get("/api/dataset/v1/usage?days=1", headers=auth)).json())["usage"]
    # three tiles of 66 thousandths; the HEAD and info.json delivered no pixels
    assert rows == [{"date": rows[0]["date"], "pool": "images", "requests": 3, "units": 1, "units_exact": 0.198}]


async def test_uncapped_keys_are_metered_by_the_exact_price(client: TestClient, data_dir: Path) -> None:
    page = await _page_id(client)
    auth = {"Authorization": f"Bearer {_key(data_dir, 'full')}"}
    for path in ("0,0,512,512/max/0/default.jpg", "full/!1000,1000/0/default.jpg?clean=1"):
        assert (await client.get(f"/iiif/3/{page}/{path}", headers=auth)).status == 200
    rows = (await (await client.get("/api/dataset/v1/usage?days=1", headers=auth)).json())["usage"]
    info = await (await client.get(f"/iiif/3/{page}/info.json")).json()
    w, h = (int(1000 * info["width"] / info["height"] + 1e-9), 1000)  # !1000,1000 of a portrait page
    exact = 66 + -(-w * h * 1000 // 4_000_000)
    assert [(r["requests"], r["units_exact"]) for r in rows] == [(2, exact / 1000)]


async def test_the_validator_test_image_needs_a_full_key_for_clean(make_client: object, tmp_path: Path) -> None:
    from tests.http.test_iiif_validator import squares_image

    client = await make_client(  # type: ignore[operator]
        iiif_test_id="validator-squares", iiif_test_image=str(squares_image(tmp_path / "squares.png"))
    )
    refused = await client.get("/iiif/3/validator-squares/full/max/0/default.png?clean=1")
    assert refused.status == 403 and (await refused.json())["error"] == "forbidden"
    marked = await client.get("/iiif/3/validator-squares/full/max/0/default.png")
    assert marked.status == 200 and marked.headers["RateLimit"] == '"images";r=499'  # 1000 x 1000: 0.25 of a unit


async def test_two_nodes_share_one_exact_pool(make_client: Any, redis_server: str) -> None:
    """Two instances on one Redis, one unit (1,000 thousandths) left, 40 concurrent 512 px tiles at 66 thousandths:
    exactly 15 are delivered (990), every other one is refused, and a 16th never slips through on either node."""
    nodes = [await make_client(access_backend="redis", redis_url=redis_server) for _ in range(2)]
    user = f"tiles-{time.time_ns()}"  # the Redis server lives for the session: a fresh subject
    auth = {"Authorization": f"Bearer {sign_session(user, int(time.time()) + 3600, 'test-secret')}"}
    access = nodes[0].server.app[ACCESS]
    assert await access.commit(await access.reserve(f"user:{user}", "images", 999 * MILLI, 1000 * MILLI))
    page = await _page_id(nodes[0])

    async def tile(i: int) -> int:
        async with nodes[i % 2].get(f"/iiif/3/{page}/0,0,512,512/max/0/default.jpg", headers=auth) as resp:
            await resp.read()
            return resp.status

    statuses = await asyncio.gather(*(tile(i) for i in range(40)))
    assert (statuses.count(200), statuses.count(429)) == (15, 25)
    pool = (await (await nodes[1].get("/api/rate_limit", headers=auth)).json())["pools"]["images"]
    assert (pool["used_exact"], pool["remaining"]) == (999.99, 0)
