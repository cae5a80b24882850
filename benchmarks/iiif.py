"""IIIF tile throughput: 512-px deep-zoom tiles of a synthetic page, cold (decode + crop + resize + encode through the
IIIF renderer and the derivative cache) and cached (cache hit), beside a plain Pillow crop-and-resize reference that
decodes the full-size JPEG for every tile, all in the same run on the same executor.

Usage: .venv/bin/python benchmarks/iiif.py [--workers 2] [--width 2600] [--height 3400]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image

from imagesvc.iiif.cache import DerivativeCache
from imagesvc.iiif.delivery import IiifSource, SourceTier, derivative_etag, produce
from imagesvc.iiif.image_api import Limits, Plan, parse_request, render
from imagesvc.imaging import TierSpec
from imagesvc.imaging.tiers import fit_size
from imagesvc.storage.local import LocalStore

__all__ = ["main"]

TILE = 512


def page(width: int, height: int) -> bytes:
    """A JPEG with photographic-like noise and structure, so decode and encode cost what real scans cost."""
    rng = np.random.default_rng(1)
    small = Image.fromarray(rng.integers(0, 255, (height // 16, width // 16, 3), dtype=np.uint8))
    img = small.resize((width, height), Image.Resampling.BICUBIC)
    out = io.BytesIO()
    img.save(out, "JPEG", quality=88)
    return out.getvalue()


def tile_requests(width: int, height: int) -> list[tuple[str, str]]:
    """Every tile of every scale factor, as OpenSeadragon asks for them: (region, size)."""
    out, factor = [], 1
    while True:
        span = TILE * factor
        for y in range(0, height, span):
            for x in range(0, width, span):
                w, h = min(span, width - x), min(span, height - y)
                out.append((f"{x},{y},{w},{h}", f"{max(1, -(-w // factor))},"))
        if span >= max(width, height):
            return out
        factor *= 2


def reference(data: bytes, plan: Plan) -> bytes:
    img = Image.open(io.BytesIO(data)).convert("RGB")
    x, y, w, h = plan.region
    out = img.crop((x, y, x + w, y + h)).resize(plan.size, Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    out.save(buf, "JPEG", quality=88)
    return buf.getvalue()


async def run(workers: int, width: int, height: int) -> None:
    full = page(width, height)
    dw, dh = fit_size(width, height, 2000)
    disp = io.BytesIO()
    Image.open(io.BytesIO(full)).resize((dw, dh), Image.Resampling.LANCZOS).save(disp, "JPEG", quality=88)
    limits = Limits(10_000, 10_000, 40_000_000)
    plans = [parse_request(r, s, "0", "default.jpg", width, height, limits) for r, s in tile_requests(width, height)]
    pool = ThreadPoolExecutor(max_workers=workers)
    loop = asyncio.get_running_loop()
    with tempfile.TemporaryDirectory() as tmp:
        store = LocalStore(Path(tmp))
        await store.put("full.jpg", full)
        await store.put("display.jpg", disp.getvalue())
        tiers = (SourceTier("display.jpg", dw, dh, "d"), SourceTier("full.jpg", width, height, "f"))
        source = IiifSource("bench-1", tiers, clean=False, delivery=None)

        class _Settings:
            max_image_pixels = 250_000_000
            jpeg_quality = 88

        class _Services:
            settings = _Settings()

        _Services.store = store  # type: ignore[attr-defined]
        runtime = type("R", (), {"pool": pool, "cache": DerivativeCache(store, 1 << 30), "limits": limits})()
        sem = asyncio.Semaphore(workers * 2)

        async def timed(make: object) -> float:
            async def one(p: Plan) -> None:
                async with sem:
                    await make(p)  # type: ignore[operator]

            start = time.perf_counter()
            await asyncio.gather(*(one(p) for p in plans))
            return len(plans) / (time.perf_counter() - start)

        async def ref(p: Plan) -> None:
            data = (await store.get("full.jpg")).data
            await loop.run_in_executor(pool, reference, data, p)

        async def ours(p: Plan) -> None:
            await produce(_Services, runtime, source, p, derivative_etag(source, p))  # type: ignore[arg-type]

        spec = TierSpec()
        assert render(full, plans[0], (width, height), (width, height), spec, 88)  # warm up imports and codecs
        ref_rate = await timed(ref)
        cold = await timed(ours)
        cached = await timed(ours)
    pool.shutdown()
    print(f"page {width}x{height}, {len(plans)} tiles of {TILE} px over all scale factors, {workers} threads")
    print("| path | tiles/s | vs reference |\n|---|---|---|")
    for name, rate in (("Pillow reference (full decode, crop, resize)", ref_rate), ("IIIF cold", cold)):
        print(f"| {name} | {rate:,.1f} | {rate / ref_rate:.2f}x |")
    print(f"| IIIF cached | {cached:,.1f} | {cached / ref_rate:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--width", type=int, default=2600)
    parser.add_argument("--height", type=int, default=3400)
    args = parser.parse_args()
    asyncio.run(run(args.workers, args.width, args.height))


if __name__ == "__main__":
    main()
