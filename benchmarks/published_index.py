"""How long a serving node takes to get dense text search from the published index, against embedding it itself.

    python benchmarks/published_index.py [--illustrations 20000] [--sample 96]

Builds a text index of ``--illustrations`` illustrations (three passages each, 384-d float32 rows, in the unchanged
``vectors.py`` format, tagged with the e5 model's key), publishes it as ``imagesvc index`` does to a local store and
to moto's S3 server (in this process), and times a node's side: fetch (streamed, sha256-checked) into an empty cache,
then load (``load_index`` and ``Passages.of``). Peak Python memory of the fetch is read with tracemalloc (moto's own
memory is excluded by measuring the local store's fetch only). The reference, measured in the same run: a serving
worker embedding ``--sample`` passages on one thread with the real model, extrapolated to every passage (what a
node without a published index did before: re-embed everything itself).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from imagesvc.catalog import Catalog
from imagesvc.search.dense import TEXT_FOLDER, Passages
from imagesvc.search.published import current, fetch, publish
from imagesvc.search.text_models import TextModel
from imagesvc.search.vectors import VectorIndex, load_index, save_index
from imagesvc.storage.local import LocalStore
from imagesvc.storage.s3 import S3Config, S3Store

__all__ = ["main"]


def synthetic_index(model_key: str, illustrations: int, dims: int = 384) -> VectorIndex:
    rng = np.random.default_rng(0)
    ids = [f"{n // 40:016x}-{n % 40 + 1}:0" for n in range(illustrations) for _ in range(3)]
    rows = rng.standard_normal((len(ids), dims), dtype=np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return VectorIndex(ids, [f"{n:032x}" for n in range(len(ids))], rows, model_key)


async def node_side(store: object, row: dict, cache: Path, *, measure_memory: bool) -> dict[str, float]:
    if measure_memory:
        tracemalloc.start()
    started = time.perf_counter()
    folder = await fetch(store, row, cache)  # type: ignore[arg-type]
    fetched = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1] if measure_memory else 0
    if measure_memory:
        tracemalloc.stop()
    started = time.perf_counter()
    index = load_index(folder, TEXT_FOLDER)
    assert index is not None
    Passages.of(index)
    return {"fetch_s": fetched, "load_s": time.perf_counter() - started, "fetch_peak_mib": peak / 2**20}


async def run(illustrations: int, sample: int) -> None:
    model = TextModel("e5", threads=1)
    work = Path(tempfile.mkdtemp(prefix="published-bench-"))
    index = synthetic_index(model.key, illustrations)
    (work / "indexer").mkdir()
    save_index(work / "indexer", index, 0, TEXT_FOLDER)
    size = sum(p.stat().st_size for p in (work / "indexer" / TEXT_FOLDER).iterdir())
    catalog = Catalog(work / "catalog.sqlite3")
    local = LocalStore(work / "store")
    started = time.perf_counter()
    done = await publish(catalog, local, "text", work / "indexer", model=model.key, illustrations=illustrations)
    published = time.perf_counter() - started
    assert done is not None
    row = current(catalog, "text")
    assert row is not None
    local_node = await node_side(local, row, work / "node-local", measure_memory=True)

    from tests.servers import start_moto

    s3, stop = start_moto()
    try:
        config = S3Config(s3.endpoint_url, f"bench-{secrets.token_hex(4)}", s3.region, s3.access_key, s3.secret_key)
        bucket = S3Store(config)
        await bucket.ensure_bucket()
        s3_catalog = Catalog(work / "s3-catalog.sqlite3")
        started = time.perf_counter()
        await publish(s3_catalog, bucket, "text", work / "indexer", model=model.key, illustrations=illustrations)
        s3_published = time.perf_counter() - started
        s3_row = current(s3_catalog, "text")
        s3_node = await node_side(bucket, s3_row, work / "node-s3", measure_memory=False)  # type: ignore[arg-type]
        await bucket.close()
        s3_catalog.close()
    finally:
        stop()

    model.load()
    texts = [f"A woodcut of a {w} with a serpent, plate {n}" for n, w in enumerate(["furnace", "sun", "herb"] * sample)]
    texts = texts[:sample]
    model.encode(texts[:8])  # warm
    started = time.perf_counter()
    model.encode(texts)
    per_passage = (time.perf_counter() - started) / len(texts)
    embed_all = per_passage * len(index.ids)

    print(f"text index: {illustrations} illustrations, {len(index.ids)} passages, {size / 2**20:.1f} MiB on disk")
    print(f"publish: local store {published:.2f} s, moto S3 {s3_published:.2f} s (files streamed; multipart on S3)")
    for name, node in (("local store", local_node), ("moto S3", s3_node)):
        total = node["fetch_s"] + node["load_s"]
        print(
            f"node from {name}: fetch+verify {node['fetch_s']:.2f} s, load {node['load_s']:.2f} s, "
            f"dense search ready after {total:.2f} s; ratio to embedding it all: {embed_all / total:.0f}x faster"
        )
    peak = local_node["fetch_peak_mib"]
    print(f"fetch peak Python memory (local store): {peak:.1f} MiB for a {size / 2**20:.0f} MiB index")
    print(
        f"reference, same run: {model.key} embeds {1 / per_passage:.1f} passages/s on one thread ({sample} sampled): "
        f"{embed_all:.0f} s to embed every passage on a node (before: each node, at each start)"
    )
    catalog.close()
    await local.close()
    shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--illustrations", type=int, default=20_000)
    parser.add_argument("--sample", type=int, default=96)
    args = parser.parse_args()
    asyncio.run(run(args.illustrations, args.sample))


if __name__ == "__main__":
    main()
