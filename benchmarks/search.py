"""Gallery search benchmark: query latency over 200,000 synthetic 512-d vectors, beside a bare numpy reference and FAISS
IndexFlatIP measured in the same run, the same query with the text encode of a fresh query (the embedded MiniLM text
model), and indexing throughput (decode + CLIP encode) with the tiny model on CPU.

Usage: .venv/bin/python benchmarks/search.py [--vectors 200000] [--queries 200] [--index-images 256] [--no-text-model]
"""

from __future__ import annotations

import argparse
import io
import time
from collections.abc import Callable

import numpy as np
from PIL import Image

from imagesvc.errors import ImagesvcError
from imagesvc.search.clip import TINY_MODEL, ClipSpec, Encoder
from imagesvc.search.dense import TextModel
from imagesvc.search.gallery import GalleryTable, Query, rank
from imagesvc.search.index import decode_for_clip
from imagesvc.search.ranking import prepared
from imagesvc.search.vectors import top_k

__all__ = ["main"]


def synthetic(n: int, dims: int, books: int, seed: int = 0) -> tuple[GalleryTable, np.ndarray]:
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((n, dims), dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    book = np.sort(rng.integers(0, books, n)).astype(np.int32)  # catalog order: grouped by book
    table = GalleryTable(
        ids=[f"b{b}-{k}:0" for k, b in enumerate(book)],
        book=book,
        book_ids=[f"b{b}" for b in range(books)],
        type=rng.integers(0, 8, n).astype(np.int32),
        types=[f"type{t}" for t in range(8)],
        year=rng.integers(1450, 1800, n).astype(np.int32),
        live=np.ones(n, bool),
        group=np.full(n, -1, np.int32),
    )
    table.vec_row = np.arange(n, dtype=np.int64)
    return table, matrix


def timed(fn: Callable[[np.ndarray], object], queries: np.ndarray) -> tuple[float, float]:
    fn(queries[0])
    times = []
    for q in queries:
        start = time.perf_counter()
        fn(q)
        times.append((time.perf_counter() - start) * 1000)
    return float(np.percentile(times, 50)), float(np.percentile(times, 95))


WORDS = ("ship", "storm", "saint", "dragon", "map", "star", "chart", "serpent", "tail", "tower", "garden", "king")


def query_texts(count: int) -> list[str]:
    """Distinct short queries, so no encode is a repeat."""
    rng = np.random.default_rng(3)
    return [" ".join(rng.choice(WORDS, 3, replace=False)) + f" {k}" for k in range(count)]


def query_latency(n: int, dims: int, count: int, text_model: bool) -> None:
    table, matrix = synthetic(n, dims, books=max(1, n // 15))
    start = time.perf_counter()
    prepared(table, len(matrix))
    print(f"per-table arrays for unfiltered queries, built once: {(time.perf_counter() - start) * 1000:.0f} ms")
    rng = np.random.default_rng(1)
    queries = rng.standard_normal((count, dims), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    rows: list[tuple[str, float, float]] = []
    rows.append(("bare numpy matmul + argpartition, top 20", *timed(lambda q: top_k(matrix, q, 20), queries)))
    try:
        import faiss

        faiss.omp_set_num_threads(2)
        flat = faiss.IndexFlatIP(dims)
        flat.add(matrix)
        rows.append(("FAISS IndexFlatIP, top 20", *timed(lambda q: flat.search(q[None, :], 20), queries)))
    except ImportError:
        print("faiss-cpu is not installed: no FAISS row")
    plain = Query(max_per_book=3, limit=20)
    rows.append(("ours: no filter, maxPerBook 3, limit 20", *timed(lambda q: rank(table, plain, matrix, q), queries)))
    typed = Query(type="type3", year_from=1500, year_to=1700, max_per_book=3, limit=20)
    rows.append(("ours: type + year range, maxPerBook 3", *timed(lambda q: rank(table, typed, matrix, q), queries)))
    deep = Query(max_per_book=3, limit=20, offset=200)
    rows.append(("ours: no filter, maxPerBook 3, offset 200", *timed(lambda q: rank(table, deep, matrix, q), queries)))
    if text_model:
        try:
            model = TextModel()
            model.encode(["warm up"])
            texts = iter(query_texts(2 * count + 2))
            alone = timed(lambda _: model.encode([next(texts)]), queries)
            rows.append(("MiniLM encode of a fresh query, alone", *alone))

            def encoded(q: np.ndarray) -> object:
                model.encode([next(texts)])
                return rank(table, plain, matrix, q)

            name = "ours: no filter, maxPerBook 3, limit 20, with the MiniLM encode of a fresh query"
            rows.append((name, *timed(encoded, queries)))
        except ImagesvcError as exc:
            print(f"no text-encode row: {exc.message}")
    ref = rows[0][2]
    print(f"\nquery latency, {n:,} x {dims} float32, {count} queries")
    print("| query | p50 ms | p95 ms | p95 / bare |\n|---|---|---|---|")
    for name, p50, p95 in rows:
        print(f"| {name} | {p50:.1f} | {p95:.1f} | {p95 / ref:.2f} |")
    ours = next(r for r in rows if r[0].startswith("ours: no filter, maxPerBook 3, limit 20"))
    print(f"unfiltered query p95: {ours[2]:.1f} ms, bare {ref:.1f} ms, ratio {ours[2] / ref:.2f} (target <= 1.2)")


def index_throughput(model: str, images: int, batch: int) -> None:
    rng = np.random.default_rng(2)
    blobs = []
    for _ in range(images):
        pixels = rng.integers(0, 255, (300, 220, 3), dtype=np.uint8)
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, "JPEG", quality=85)
        blobs.append(buf.getvalue())
    encoder = Encoder(ClipSpec(model, "random", "cpu", 2))
    encoder.load()
    size = encoder.image_size
    encoder.encode_images([decode_for_clip(blobs[0], size)])
    start = time.perf_counter()
    for s in range(0, images, batch):
        encoder.encode_images([decode_for_clip(b, size) for b in blobs[s : s + batch]])
    seconds = time.perf_counter() - start
    print(
        f"\nindexing {model} (random weights) on CPU: {images} 300x220 JPEGs, decode + encode, batch {batch}: "
        f"{images / seconds:.0f} images/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--vectors", type=int, default=200_000)
    parser.add_argument("--dims", type=int, default=512)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--index-images", type=int, default=256)
    parser.add_argument("--vit", action="store_true", help="also time ViT-B-32 (random weights) indexing")
    parser.add_argument("--no-text-model", action="store_true", help="skip the row with the MiniLM text encode")
    args = parser.parse_args()
    query_latency(args.vectors, args.dims, args.queries, not args.no_text_model)
    index_throughput(TINY_MODEL, args.index_images, 64)
    if args.vit:
        index_throughput("ViT-B-32", 64, 16)


if __name__ == "__main__":
    main()
