"""Search indexes computed once: two real ``imagesvc serve`` nodes over one PostgreSQL and one S3 server (moto) rank
with the text index ``imagesvc index`` published to the store, having embedded nothing themselves; they follow a
newly published index without a restart, and refuse a tampered or missing file while they keep the index they have.
Before anything is published they rank by keywords, say so once in their log, and ``imagesvc doctor`` says what to
run.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from imagesvc.catalog.postgres import PostgresCatalog
from imagesvc.search.published import current, fetch, publish
from imagesvc.storage.s3 import S3Config, S3Store
from tests.servers import S3Server
from tests.test_ingest_kills import ingest_env
from tests.test_postgres_nodes import SEFER, SPECULUM, cli, ingest, manifest_of, shared  # noqa: F401 - a fixture
from tests.test_scale_out import Node


async def _gallery(session: aiohttp.ClientSession, node: Node, query: str) -> dict[str, Any]:
    async with session.get(f"{node.url}/api/gallery", params={"query": query}) as resp:
        body = await resp.json()
        assert resp.status == 200, body
        return body  # type: ignore[no-any-return]


def _row(url: str) -> dict[str, Any]:
    catalog = PostgresCatalog(url)
    try:
        row = current(catalog, "text")
        assert row is not None
        return row
    finally:
        catalog.close()


async def _variant(store: S3Store, url: str, row: dict[str, Any], work: Path, name: str) -> str:
    """Publish the text index ``row`` names again with one file changed (its pointer's date): a new digest."""
    source = await fetch(store, row, work / "cache")
    target = work / name
    shutil.copytree(source / "textvectors", target / "textvectors")
    pointer = json.loads((target / "textvectors" / "current.json").read_text())
    (target / "textvectors" / "current.json").write_text(json.dumps(pointer | {"written_at": name}))
    catalog = PostgresCatalog(url)
    try:
        done = await publish(catalog, store, "text", target, model=row["model"], illustrations=row["illustrations"])
    finally:
        catalog.close()
    assert done is not None and done.changed
    return done.digest


@pytest.mark.slow
async def test_nodes_rank_with_the_published_index_follow_new_ones_and_refuse_bad_ones(
    shared: dict[str, str],  # noqa: F811 - the fixture imported above
    moto_server: S3Server,
    demo_library: dict[str, Any],
    tmp_path: Path,
) -> None:
    env = shared | {"IMAGESVC_TEXT_MODEL": "e5", "IMAGESVC_SEARCH_WAIT": "30"}
    sefer = manifest_of(demo_library["manifest"], [SEFER], tmp_path / "a.json")
    ingest(ingest_env(tmp_path / "ingester", **env), sefer)
    operator = ingest_env(tmp_path / "operator", **env)
    one = env | {"IMAGESVC_SERVE_WORKERS": "1"}  # one process a node: its log says things once
    nodes = [Node(ingest_env(tmp_path / f"node-{n}", **one), tmp_path / f"node-{n}.log") for n in "ab"]
    s3 = moto_server
    store = S3Store(S3Config(s3.endpoint_url, env["IMAGESVC_S3_BUCKET"], s3.region, s3.access_key, s3.secret_key))
    url = env["IMAGESVC_DATABASE_URL"]
    try:
        async with aiohttp.ClientSession() as session:
            for node in nodes:
                await node.ready(session)
            # Nothing published yet: keyword ranking, and the nodes say what to run.
            for node in nodes:
                body = await _gallery(session, node, "stars")
                assert "dense-text" not in body["search"]["signals"], body["search"]
                assert "run `imagesvc index`" in body["search"]["text_model"], body["search"]
            doctor = cli(operator, "doctor")
            assert "no published blocks, text index in the catalog: run `imagesvc index`" in doctor.stdout
            assert "feature index: none published: run `imagesvc index`" in doctor.stdout

            # `imagesvc index` embeds once and publishes; both nodes rank with it at their next query.
            done = cli(operator, "index", "--quiet")
            assert done.returncode == 0, done.stderr[-3000:]
            assert "text index: published sha256:" in done.stdout, done.stdout
            first = _row(url)["digest"]
            for node in nodes:
                body = await _gallery(session, node, "stars")
                assert "dense-text" in body["search"]["signals"], body["search"]
                assert body["search"]["text_index"] == {"source": "published", "digest": first, "embedded_here": 0}
                assert any(item["scores"]["dense"] is not None for item in body["items"])
            doctor = cli(operator, "doctor")
            assert "indexes: published: blocks sha256:" in doctor.stdout
            assert "ok   feature index: sha256:" in doctor.stdout and "-patch41-fit19" in doctor.stdout

            # A new book and a new index: the running nodes follow it, still embedding nothing.
            ingest(
                ingest_env(tmp_path / "ingester-2", **env),
                manifest_of(demo_library["manifest"], [SPECULUM], tmp_path / "b.json"),
            )
            done = cli(operator, "index", "--quiet")
            assert done.returncode == 0, done.stderr[-3000:]
            row = _row(url)
            second = row["digest"]
            assert second != first
            for node in nodes:
                body = await _gallery(session, node, "furnace")
                assert body["search"]["text_index"] == {"source": "published", "digest": second, "embedded_here": 0}
                dense = [i for i in body["items"] if i["scores"]["dense"] is not None and SPECULUM in json.dumps(i)]
                assert dense, body["items"]

            # A tampered file, then a missing one: refused, and each node keeps ranking with the index it has.
            tampered = await _variant(store, url, row, tmp_path / "work", "tampered")
            manifest = json.loads((await store.get(f"indexes/text/{tampered}.json")).data)
            pointer = manifest["files"]["textvectors/current.json"]["sha256"]
            await store.put(f"indexes/text/files/{pointer}", b'{"version": 1, "file": "../../etc/passwd"}')
            for node in nodes:
                body = await _gallery(session, node, "furnace")
                status = body["search"]
                assert "dense-text" in status["signals"] and status["text_index"]["digest"] == second, status
                assert "does not match its manifest" in status["text_index"]["refused"][tampered]
            missing = await _variant(store, url, row, tmp_path / "work", "missing")
            manifest = json.loads((await store.get(f"indexes/text/{missing}.json")).data)
            await store.delete(f"indexes/text/files/{manifest['files']['textvectors/current.json']['sha256']}")
            for node in nodes:
                status = (await _gallery(session, node, "furnace"))["search"]
                assert "dense-text" in status["signals"] and status["text_index"]["digest"] == second, status
                assert missing in status["text_index"]["refused"]
    finally:
        for node in nodes:
            node.stop()
        await store.close()
    for name in ("node-a", "node-b"):
        log = (tmp_path / f"{name}.log").read_text()
        assert log.count("no text index is published in the catalog") == 1, log[-3000:]  # said once, not per query
        assert not (tmp_path / name / "textvectors").exists()  # nothing embedded or built on a node
        assert [p.name for p in (tmp_path / name / "index-cache" / "text").iterdir()] != []
