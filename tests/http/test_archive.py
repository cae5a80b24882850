"""GET /books/{id}/archive: a book's page images in one request, metered and personalised as /image, as a ZIP or
TAR that unpacks into a BagIt bag; every refusal before the first byte, every shortfall ended cleanly."""

from __future__ import annotations

import asyncio
import io
import socket
import tarfile
import time
import zipfile
from pathlib import Path
from typing import Any

import bagit
import pytest
from aiohttp.test_utils import TestClient

from imagesvc.access import MILLI
from imagesvc.imaging.xmp import read_xmp
from imagesvc.provenance.manifests import DELIVERY_LABEL
from imagesvc.provenance.sign import read_credentials
from imagesvc.web.app_keys import ACCESS
from tests.http.keys import new_key
from tests.servers import Redis
from tests.test_faults import assert_unavailable

MINES = "demo-traite-des-mines"  # 7 pages; page 7 has no image
SPECULUM = "demo-speculum-fornacum"  # 8 pages


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _unzip(body: bytes, into: Path) -> Path:
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        assert archive.testzip() is None
        archive.extractall(into / "unpacked")
    (root,) = list((into / "unpacked").iterdir())
    return root


async def _spend(client: TestClient, key_id: str, leave: int) -> None:
    """Use up a free key's image pool until ``leave`` units are left (as if delivered earlier today)."""
    access = client.app[ACCESS]
    held = await access.reserve(f"key:{key_id}", "images", (2000 - leave) * MILLI, 2000 * MILLI)
    assert await access.commit(held)


async def _images_used(client: TestClient, key: str) -> float:
    pools = (await (await client.get("/api/rate_limit", headers=_auth(key))).json())["pools"]
    return pools["images"]["used_exact"]


async def _metered_images(client: TestClient, key: str) -> float:
    usage = (await (await client.get("/api/dataset/v1/usage", headers=_auth(key))).json())["usage"]
    return sum(row["units_exact"] for row in usage if row["pool"] == "images")


async def test_a_full_key_gets_the_whole_book_as_a_valid_bag_of_personalised_signed_images(
    client: TestClient, data_dir: Path, tmp_path: Path
) -> None:
    key, key_id = new_key(data_dir, "full")
    resp = await client.get(f"/api/books/{MINES}/archive", params={"tier": "display"}, headers=_auth(key))
    assert resp.status == 200 and resp.content_type == "application/zip"
    assert resp.headers["X-Archive-Pages"] == "1-7" and resp.headers["X-Archive-Images"] == "6"
    root = _unzip(await resp.read(), tmp_path)
    bag = bagit.Bag(str(root))
    bag.validate()  # every digest in manifest-sha256.txt is of the bytes received
    info = bag.info
    assert info["Key-Reference"] == key_id and info["Complete"] == "true"
    assert info["Request-Id"] == resp.headers["X-Request-Id"]
    assert info["Catalog-Version"] == resp.headers["X-Catalog-Version"]
    images = sorted((root / "data").iterdir())
    assert len(images) == 6
    for path in images:
        data = path.read_bytes()
        assert key_id in (read_xmp(data) or "")  # the XMP note /image writes
        found = read_credentials(data, data_dir / "c2pa" / "root.pem")
        assert found.state == "Trusted", found.failures
        assert found.assertion(DELIVERY_LABEL)["key_ref"] == key_id
    assert await _metered_images(client, key) == 6  # one image unit per page image, as /image meters


async def test_anonymous_callers_are_told_how_to_get_a_key(client: TestClient) -> None:
    resp = await client.get(f"/api/books/{MINES}/archive")
    body = await resp.json()
    assert resp.status == 401 and body["error"] == "unauthorized"
    assert any("free API key" in hint for hint in body["recovery"])


@pytest.mark.parametrize("tier", ["free", "domain"])
async def test_a_key_without_clean_entitlement_gets_no_clean_archive(
    client: TestClient, data_dir: Path, tier: str
) -> None:
    key, _ = new_key(data_dir, tier)
    resp = await client.get(f"/api/books/{MINES}/archive", params={"clean": "1"}, headers=_auth(key))
    assert resp.status == 403 and resp.content_type == "application/json"
    assert (await resp.json())["required_tiers"] == ["full", "enterprise"]
    assert await _images_used(client, key) == 0


async def test_a_free_key_short_of_units_gets_what_it_can_pay_and_where_to_resume(
    client: TestClient, data_dir: Path, tmp_path: Path
) -> None:
    key, key_id = new_key(data_dir, "free")
    await _spend(client, key_id, leave=3)
    resp = await client.get(f"/api/books/{SPECULUM}/archive", params={"tier": "thumb"}, headers=_auth(key))
    assert resp.status == 200
    root = _unzip(await resp.read(), tmp_path)
    bagit.Bag(str(root)).validate()  # a shorter bag, still valid
    assert len(list((root / "data").iterdir())) == 3
    info = bagit.Bag(str(root)).info
    assert info["Complete"] == "false" and info["Resume-From"] == "4" and info["Pages-Delivered"] == "1,2,3"
    resume = (root / "RESUME.txt").read_text()
    assert "page 4" in resume and "from=4" in resume and "rate_limited" in resume
    assert await _images_used(client, key) == 2000
    again = await client.get(f"/api/books/{SPECULUM}/archive", params={"from": "4"}, headers=_auth(key))
    assert again.status == 429 and again.content_type == "application/json"  # nothing to pay with: before any byte
    assert int(again.headers["Retry-After"]) > 0


async def test_a_client_that_hangs_up_halfway_pays_only_for_members_it_was_sent(
    client: TestClient, data_dir: Path
) -> None:
    """A reader that takes a few kilobytes and hangs up leaves the server blocked after the first members (the
    kernel's socket buffers hold up to 4 MiB here; this book's full tier is 5 MB): those not fully handed over are
    refunded, and nothing stays reserved."""
    key, _ = new_key(data_dir, "free")
    request = (
        f"GET /api/books/{SPECULUM}/archive?tier=full HTTP/1.1\r\nHost: localhost\r\n"
        f"Authorization: Bearer {key}\r\n\r\n"
    ).encode()

    def cut_off() -> bytes:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect((client.host, client.port))
            sock.sendall(request)
            sock.settimeout(60)
            head = sock.recv(4096)
            time.sleep(0.5)
        return head

    head = await asyncio.to_thread(cut_off)
    assert head.startswith(b"HTTP/1.1 200") and b"application/zip" in head
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the refund comes when the server's next write fails
        used, metered = await _images_used(client, key), await _metered_images(client, key)
        if used == metered:
            break
        await asyncio.sleep(0.1)
    assert used == metered < 8  # only committed members count: no reservation left pending, not the whole book


async def test_two_archives_at_once_from_one_free_key_never_spend_more_than_it_has(
    client: TestClient, data_dir: Path, tmp_path: Path
) -> None:
    key, key_id = new_key(data_dir, "free")
    await _spend(client, key_id, leave=10)

    async def fetch(n: int) -> Path:
        resp = await client.get(f"/api/books/{SPECULUM}/archive", params={"tier": "thumb"}, headers=_auth(key))
        assert resp.status == 200
        return _unzip(await resp.read(), tmp_path / str(n))

    bags = await asyncio.gather(fetch(1), fetch(2))
    counts = [len(list((root / "data").iterdir())) for root in bags]
    assert sum(counts) == 10 and all(1 <= c <= 8 for c in counts)
    for root in bags:
        bagit.Bag(str(root)).validate()
    assert any((root / "RESUME.txt").exists() for root in bags)
    assert await _images_used(client, key) == await _metered_images(client, key) == 2000  # 1,990 before, 10 now


async def test_a_page_range_past_the_end_is_refused_and_a_long_one_is_cut(client: TestClient, data_dir: Path) -> None:
    key, _ = new_key(data_dir, "full")
    past = await client.get(f"/api/books/{MINES}/archive", params={"from": "20"}, headers=_auth(key))
    body = await past.json()
    assert past.status == 400 and body["first_page"] == 1 and body["last_page"] == 7
    long = await client.get(
        f"/api/books/{MINES}/archive", params={"from": "5", "to": "99", "tier": "thumb"}, headers=_auth(key)
    )
    assert long.status == 200 and long.headers["X-Archive-Pages"] == "5-7"
    await long.read()


async def test_missing_pages_are_listed_not_invented(client: TestClient, data_dir: Path, tmp_path: Path) -> None:
    key, _ = new_key(data_dir, "full")
    resp = await client.get(
        f"/api/books/{MINES}/archive", params={"from": "6", "tier": "thumb", "format": "tar"}, headers=_auth(key)
    )
    members: dict[str, Any] = {}
    with tarfile.open(fileobj=io.BytesIO(await resp.read()), mode="r|") as archive:
        for member in archive:
            data = archive.extractfile(member).read()  # type: ignore[union-attr]
            members[member.name.split("/", 1)[1]] = (data, member.pax_headers)
    assert [n for n in members if n.startswith("data/")] == ["data/demo-traite-des-mines-p6-thumb.jpg"]
    assert members["image-unavailable.txt"][0].decode().startswith("7\timage_unavailable\t")
    assert "p7" not in members["manifest-sha256.txt"][0].decode()
    import hashlib

    data, pax = members["data/demo-traite-des-mines-p6-thumb.jpg"]
    assert pax["IMAGESVC.sha256"] == hashlib.sha256(data).hexdigest()  # each member verifiable as it arrives


async def test_with_the_access_backend_down_nothing_is_sent(data_dir: Path, make_client: Any, redis: Redis) -> None:
    client = await make_client(access_backend="redis", redis_url=redis.url)
    key, _ = new_key(data_dir, "full")
    assert (await client.get(f"/api/books/{MINES}/archive?tier=thumb", headers=_auth(key))).status == 200
    redis.stop()
    await assert_unavailable(await client.get(f"/api/books/{MINES}/archive?tier=thumb", headers=_auth(key)))


async def test_the_tool_prices_the_archive_without_delivering_it(client: TestClient, data_dir: Path) -> None:
    key, key_id = new_key(data_dir, "free")
    await _spend(client, key_id, leave=4)
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "get_book_archive", "arguments": {"book_id": MINES, "format": "tar"}},
    }
    resp = await client.post("/api/mcp", json=call, headers=_auth(key))
    result = (await resp.json())["result"]["structuredContent"]
    assert result["url"].endswith(f"/api/books/{MINES}/archive?tier=full&format=tar&from=1&to=7")
    assert result["cost"] == {"requests": 1, "pool": "images", "units": 6, "remaining": 4, "affordable": 4}
    assert result["image_unavailable"] == [7]
    assert await _images_used(client, key) == 1996


async def test_head_range_and_conditional_requests_pay_for_what_is_delivered(
    client: TestClient, data_dir: Path, tmp_path: Path
) -> None:
    """A HEAD answers as GET would and sends no member, so it costs nothing (and is a 429 where GET is one); a Range
    or conditional header does not make a partial or empty archive that is charged whole: the archive is sent whole,
    each image charged once."""
    key, key_id = new_key(data_dir, "free")
    head = await client.head(f"/api/books/{MINES}/archive", params={"tier": "thumb"}, headers=_auth(key))
    assert head.status == 200 and head.headers["X-Archive-Images"] == "6" and await head.read() == b""
    assert await _images_used(client, key) == 0
    for extra in ({"Range": "bytes=0-99"}, {"If-None-Match": "*"}, {"If-Range": '"x"', "Range": "bytes=10-"}):
        resp = await client.get(f"/api/books/{MINES}/archive", params={"tier": "thumb"}, headers=_auth(key) | extra)
        assert resp.status == 200 and "Content-Range" not in resp.headers, extra
        root = _unzip(await resp.read(), tmp_path / str(len(extra)) / extra.get("Range", "none"))
        bagit.Bag(str(root)).validate()
        assert len(list((root / "data").iterdir())) == 6
    assert await _images_used(client, key) == await _metered_images(client, key) == 18
    await _spend(client, key_id, leave=18)  # the 18 delivered above and these: the pool is spent
    empty = await client.head(f"/api/books/{MINES}/archive", params={"tier": "thumb"}, headers=_auth(key))
    assert empty.status == 429 and int(empty.headers["Retry-After"]) > 0


async def test_a_clean_archive_holds_the_pixels_clean_image_sends_and_never_the_marked_ones(
    client: TestClient, data_dir: Path, tmp_path: Path
) -> None:
    from PIL import Image, ImageChops

    key, _ = new_key(data_dir, "full")
    resp = await client.get(f"/api/books/{MINES}/archive", params={"tier": "thumb", "clean": "1"}, headers=_auth(key))
    assert resp.status == 200 and resp.headers["Content-Disposition"].endswith('-thumb-clean-p1-7.zip"')
    root = _unzip(await resp.read(), tmp_path)
    assert root.name == f"{MINES}-thumb-clean" and bagit.Bag(str(root)).info["Clean"] == "true"
    member = root / "data" / f"{MINES}-p2-thumb-clean.jpg"

    async def pixels(clean: str) -> Image.Image:
        params = {"book_id": MINES, "page": "2", "tier": "thumb", "clean": clean}
        got = await client.get("/api/image", params=params, headers=_auth(key))
        return Image.open(io.BytesIO(await got.read())).convert("RGB")

    archived = Image.open(member).convert("RGB")
    assert ImageChops.difference(archived, await pixels("1")).getbbox() is None  # the same pixels as /image sends
    assert ImageChops.difference(archived, await pixels("0")).getbbox() is not None  # not the marked tier's


@pytest.mark.parametrize(
    ("params", "says"),
    [({"from": "20"}, "from=20 is past the last page"), ({"from": "5", "to": "3"}, "from=5 comes after to=3")],
)
async def test_a_range_refusal_says_what_is_wrong_with_it(
    client: TestClient, data_dir: Path, params: dict[str, str], says: str
) -> None:
    key, _ = new_key(data_dir, "full")
    resp = await client.get(f"/api/books/{MINES}/archive", params=params, headers=_auth(key))
    body = await resp.json()
    assert resp.status == 400 and body["message"].startswith(says) and "has pages 1-7" in body["message"], body
    assert "Pages 20-7" not in body["message"] and "5-3 lie outside" not in body["message"]
