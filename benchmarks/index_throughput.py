"""``imagesvc index`` throughput: the embedding pipeline end to end (decode included) beside the model alone.

Run ``python benchmarks/index_throughput.py [--device auto|cpu|cuda] [--images N] [--model ViT-B-32]``. It prints, in
one run on one machine:

- model only: the image tower on ready-made, normalised input tensors already on the device, at the plan's batch;
- pipeline: ``imagesvc.search.embedding_pipeline.embed_images`` over 300 px JPEG thumbnails held in memory (the stored
  thumb tier the index reads), decoding and resizing included, with the plan ``imagesvc index`` picks for the device
  (GPU decoding with nvJPEG on CUDA; decoder processes on every core otherwise), and on CUDA also with CPU decoding;
- the serial loop ``imagesvc index`` ran before the pipeline (decode, open_clip's PIL transform, model, one after
  another), on a smaller sample.

Weights are random (no download is possible here): throughput does not depend on them.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from imagesvc.search.clip import ClipSpec, Encoder
from imagesvc.search.embedding_pipeline import Plan, embed_images, plan_for
from imagesvc.search.prepare import prepare_one

DISTINCT = 1000  # distinct thumbnails; the corpus cycles through them


def thumbnails(count: int) -> list[bytes]:
    """JPEG thumbnails of longest side 300 px, portrait and landscape, with woodcut-like texture (20-40 KB each)."""
    rng = np.random.default_rng(7)
    out = []
    for i in range(count):
        w, h = (300, int(rng.integers(180, 300))) if i % 3 else (int(rng.integers(180, 300)), 300)
        coarse = rng.random((h // 6 + 1, w // 6 + 1)) * 255
        image = Image.fromarray(coarse.astype("uint8")).resize((w, h), Image.Resampling.BICUBIC)
        fine = (np.asarray(image, dtype=float) * 0.8 + rng.random((h, w)) * 50).clip(0, 255).astype("uint8")
        tint = np.stack([fine, (fine * 0.92).astype("uint8"), (fine * 0.8).astype("uint8")], axis=-1)
        buf = io.BytesIO()
        Image.fromarray(tint).save(buf, "JPEG", quality=85)
        out.append(buf.getvalue())
    return out


def model_only(encoder: Encoder, batch: int, seconds: float) -> float:
    """Images/s of the image tower alone on normalised input already on the device."""
    import torch

    model, device = encoder._model, encoder.device
    dtype = torch.float16 if device == "cuda" else torch.float32
    size = encoder.image_size
    x = torch.randn(batch, 3, size, size, device=device, dtype=dtype).contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        for _ in range(3):
            model.encode_image(x)
        _sync(device)
        done, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            model.encode_image(x).float().cpu()
            done += batch
        _sync(device)
    return done / (time.perf_counter() - started)


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


async def pipeline(encoder: Encoder, blobs: list[bytes], total: int, plan: Plan) -> float:
    async def read(iid: str) -> bytes | None:
        return blobs[int(iid) % len(blobs)]

    pool = None
    if not plan.gpu_decode:
        pool = ProcessPoolExecutor(plan.decoders, mp_context=multiprocessing.get_context("spawn"))
        list(pool.map(prepare_one, blobs[: plan.decoders], [encoder.image_size] * plan.decoders))  # start workers
    try:
        warm = [str(i) for i in range(plan.batch * 2)]
        await embed_images(warm, read, encoder, plan, pool)
        ids = [str(i) for i in range(total)]
        started = time.perf_counter()
        vectors, failed = await embed_images(ids, read, encoder, plan, pool)
        elapsed = time.perf_counter() - started
    finally:
        if pool:
            pool.shutdown()
    assert len(vectors) == total and failed == 0, (len(vectors), failed)
    return total / elapsed


def serial(encoder: Encoder, blobs: list[bytes], total: int, batch: int) -> float:
    """The loop ``imagesvc index`` ran before: decode (draft), open_clip's PIL transform and the model in turn."""
    size = encoder.image_size

    def decode(data: bytes) -> Image.Image:
        img = Image.open(io.BytesIO(data))
        img.draft("RGB", (size, size))
        return img.convert("RGB")

    encoder.encode_images([decode(blobs[0])])
    started = time.perf_counter()
    for start in range(0, total, batch):
        encoder.encode_images([decode(blobs[i % len(blobs)]) for i in range(start, min(total, start + batch))])
    return total / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--model", default="ViT-B-32")
    parser.add_argument("--images", type=int, default=0, help="pipeline images (default: 60,000 on CUDA, 600 on CPU)")
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of the model-only measurement")
    args = parser.parse_args()
    threads = os.cpu_count() or 1
    encoder = Encoder(ClipSpec(args.model, "random", args.device, threads))
    encoder.load()
    device = encoder.device
    plan = plan_for(device)
    total = args.images or (60_000 if device == "cuda" else 600)
    blobs = thumbnails(DISTINCT)
    print(f"device {device}, {threads} cores, {args.model}, batch {plan.batch}, {plan.decoders} decoder processes")
    print(f"corpus: {DISTINCT} distinct JPEG thumbs, mean {sum(map(len, blobs)) / len(blobs) / 1024:.1f} KiB")
    reference = model_only(encoder, plan.batch, args.seconds)
    print(f"model only            {reference:10,.0f} images/s  (100%)")
    rows = [("pipeline", plan)]
    if plan.gpu_decode:
        rows.append(("pipeline, CPU decode", Plan(plan.batch, plan.decoders, gpu_decode=False)))
    for label, chosen in rows:
        rate = asyncio.run(pipeline(encoder, blobs, total, chosen))
        print(f"{label:<21} {rate:10,.0f} images/s  ({rate / reference:.0%} of model only), {total:,} images")
    sample = min(total, 5_000 if device == "cuda" else 200)
    rate = serial(encoder, blobs, sample, plan.batch)
    print(f"serial loop (before)  {rate:10,.0f} images/s  ({rate / reference:.0%} of model only), {sample:,} images")


if __name__ == "__main__":
    main()
