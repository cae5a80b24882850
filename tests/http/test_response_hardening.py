"""Smaller abuse findings kept as tests: nosniff on every response, no absolute path in the viewer's 404, IIIF ids
built from the configured site URL (or, without one, from the Host header and varying by it), and IIIF renders
priced by what they cost, not only by their output's area."""

from __future__ import annotations

from pathlib import Path

from aiohttp.test_utils import TestClient

from tests.http.conftest import MakeClient


async def _page_id(client: TestClient) -> str:
    book = await (await client.get("/api/books/demo-speculum-fornacum")).json()
    return f"{book['id']}-2"


async def test_json_and_image_responses_say_nosniff(client: TestClient) -> None:
    page = await _page_id(client)
    for path in ("/api/books", "/health", f"/iiif/3/{page}/0,0,64,64/max/0/default.jpg", "/api/no-such-route"):
        response = await client.get(path)
        assert response.headers.get("X-Content-Type-Options") == "nosniff", path


async def test_the_viewer_404_names_no_folder_of_the_server(make_client: MakeClient, tmp_path: Path) -> None:
    folder = tmp_path / "nowhere" / "viewer"
    client = await make_client(viewer_dir=folder)
    response = await client.get("/viewer/openseadragon.min.js")
    text = await response.text()
    assert response.status == 404 and "not installed" in text
    assert str(tmp_path) not in text and "/nowhere" not in text


async def test_with_a_configured_site_url_no_host_header_reaches_iiif_ids(make_client: MakeClient) -> None:
    """An attacker's Host header cannot poison a cached info.json, manifest or redirect: with IMAGESVC_SITE_URL
    set, every id and Location is built from it, and the documents do not vary by Host."""
    client = await make_client(site_url="https://books.example.org")
    page = await _page_id(client)
    evil = {"Host": "attacker.example"}
    redirect = await client.get(f"/iiif/3/{page}", headers=evil, allow_redirects=False)
    assert redirect.headers["Location"] == f"https://books.example.org/iiif/3/{page}/info.json"
    assert "Host" not in redirect.headers.get("Vary", "")
    info = await client.get(f"/iiif/3/{page}/info.json", headers=evil)
    assert (await info.json())["id"] == f"https://books.example.org/iiif/3/{page}"
    assert "Host" not in info.headers["Vary"]
    manifest = await (await client.get("/iiif/3/manifest/demo-speculum-fornacum", headers=evil)).text()
    assert "attacker.example" not in manifest and "https://books.example.org/iiif/3/" in manifest


async def test_iiif_documents_built_from_the_host_header_vary_by_it(make_client: MakeClient) -> None:
    """Without a configured site URL, ids follow the Host the client used (as viewers and the validator need), and
    every response carrying one varies by Host."""
    client = await make_client(site_url="")
    page = await _page_id(client)
    evil = {"Host": "attacker.example"}
    redirect = await client.get(f"/iiif/3/{page}", headers=evil, allow_redirects=False)
    assert redirect.status == 303
    assert "Host" in [v.strip() for v in redirect.headers["Vary"].split(",")]
    assert redirect.headers["Location"].startswith("http://attacker.example/iiif/3/")
    info = await client.get(f"/iiif/3/{page}/info.json", headers=evil)
    assert info.status == 200 and "public" in info.headers["Cache-Control"]
    assert "Host" in [v.strip() for v in info.headers["Vary"].split(",")]


async def test_a_tiny_output_of_a_large_region_costs_what_a_render_costs(client: TestClient) -> None:
    """A 1 x 1 pixel cut from a whole page costs at least a small tile (16 thousandths), not one thousandth; a
    viewer's 512-px tile still costs its area (66)."""
    page = await _page_id(client)

    async def used() -> float:
        return (await (await client.get("/api/rate_limit")).json())["pools"]["images"]["used_exact"]

    assert (await client.get(f"/iiif/3/{page}/full/1,1/0/default.jpg")).status == 200
    first = await used()
    assert first >= 0.016
    assert (await client.get(f"/iiif/3/{page}/0,0,512,512/max/0/default.jpg")).status == 200
    assert round(await used() - first, 3) == 0.066
