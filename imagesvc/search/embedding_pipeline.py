"""The embedding pipeline of ``imagesvc index``: reads, decoding and the model overlapped through bounded queues.

Three stages run at once, each bounded so memory stays flat however many images there are:
reads from the store (concurrent, async) -> decoding and resizing, either in worker processes over slices of images
(one contiguous uint8 array back per slice) or on the GPU (nvJPEG through torchvision) -> the model, fed full batches
of pixels and normalising them on its own device. The model never waits for a decode it could have overlapped, and the
decoders never run more than a few batches ahead of it.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

import numpy as np

from imagesvc.search.prepare import prepare_slice

__all__ = ["Plan", "embed_images", "plan_for"]

log = logging.getLogger("imagesvc.search.embedding_pipeline")
Reader = Callable[[str], Awaitable[bytes | None]]
_END = object()


@dataclass(frozen=True)
class Plan:
    """How to run the pipeline: images per model batch, decoder processes, and whether the GPU decodes."""

    batch: int
    decoders: int
    gpu_decode: bool

    @property
    def slice(self) -> int:
        """Images per decoding task: on the GPU a whole batch (one nvJPEG call, one resampling op); on the CPU small
        enough to spread one batch over every decoder process, big enough to amortise the hand-over."""
        if self.gpu_decode:
            return self.batch
        return max(8, min(64, self.batch // max(1, self.decoders)))


def plan_for(device: str, batch: int = 0, decoders: int = 0, gpu_decode: bool | None = None) -> Plan:
    """The plan for ``device`` ("cuda" or "cpu"); 0 and None pick the defaults measured in docs/benchmarks.md.

    On a GPU the model wants large batches (256) and JPEG decoding moves to the GPU too; on a CPU the model is the
    bottleneck by two orders of magnitude, so batches of 64 and one decoder process per core leave it fed.
    """
    on_gpu = device == "cuda"
    return Plan(
        batch=batch or (256 if on_gpu else 64),
        decoders=decoders or max(1, os.cpu_count() or 1),
        gpu_decode=on_gpu if gpu_decode is None else gpu_decode,
    )


class _Pixels:
    """A decoded slice: the ids that decoded and their pixels (numpy on the host, or a tensor on the device)."""

    __slots__ = ("ids", "pixels")

    def __init__(self, ids: list[str], pixels: object) -> None:
        self.ids, self.pixels = ids, pixels


async def embed_images(
    ids: Sequence[str],
    read: Reader,
    encoder: object,
    plan: Plan,
    pool: Executor | None,
    *,
    on_progress: Callable[[int], None] | None = None,
) -> tuple[dict[str, np.ndarray], int]:
    """Embed the images named by ``ids`` (bytes from ``read``); returns their vectors and the number that failed.

    ``encoder`` provides ``image_size``, ``encode_pixels(array)`` and, for GPU decoding, ``decode_on_device(datas)``.
    ``pool`` runs CPU decoding (a process pool; ``None`` decodes in threads). An image that cannot be read or decoded
    counts as failed and is left out.
    """
    size = encoder.image_size  # type: ignore[attr-defined]
    raw: asyncio.Queue[object] = asyncio.Queue(maxsize=max(2, 2 * plan.decoders))
    decoded: asyncio.Queue[object] = asyncio.Queue(maxsize=max(2, 2 * plan.batch // plan.slice))
    reads = asyncio.Semaphore(64)
    loop = asyncio.get_running_loop()

    async def read_one(iid: str) -> bytes | None:
        async with reads:
            return await read(iid)

    async def reader() -> None:
        for start in range(0, len(ids), plan.slice):
            chunk = list(ids[start : start + plan.slice])
            await raw.put((chunk, await asyncio.gather(*(read_one(i) for i in chunk))))
        for _ in range(workers):
            await raw.put(_END)

    async def decoder() -> None:
        while (item := await raw.get()) is not _END:
            chunk, datas = item  # type: ignore[misc]
            if plan.gpu_decode:
                pixels, kept = await asyncio.to_thread(encoder.decode_on_device, datas)  # type: ignore[attr-defined]
            else:
                pixels, kept = await loop.run_in_executor(pool, prepare_slice, datas, size)
            await decoded.put(_Pixels([chunk[k] for k in kept], pixels))
            if on_progress and len(kept) < len(chunk):
                on_progress(len(chunk) - len(kept))
        await decoded.put(_END)

    vectors: dict[str, np.ndarray] = {}

    async def model() -> None:
        finished, pending, count = 0, [], 0
        while finished < workers:
            item = await decoded.get()
            if item is _END:
                finished += 1
            else:
                pending.append(item)
                count += len(item.ids)  # type: ignore[attr-defined]
            if pending and (count >= plan.batch or finished == workers):
                await _run_batch(encoder, pending, vectors, on_progress)
                pending, count = [], 0

    workers = 3 if plan.gpu_decode else plan.decoders  # GPU: threads, so one batch decodes while the next is read
    await asyncio.gather(reader(), model(), *(decoder() for _ in range(workers)))
    return vectors, len(ids) - len(vectors)


async def _run_batch(
    encoder: object, parts: list[_Pixels], vectors: dict[str, np.ndarray], on_progress: Callable[[int], None] | None
) -> None:
    ids = [i for part in parts for i in part.ids]
    if not ids:
        return
    arrays = [part.pixels for part in parts if part.ids]
    if isinstance(arrays[0], np.ndarray):
        batch: object = arrays[0] if len(arrays) == 1 else np.concatenate(arrays)  # type: ignore[arg-type]
    else:
        import torch

        batch = torch.cat(arrays)  # type: ignore[arg-type]
    out = await asyncio.to_thread(encoder.encode_pixels, batch)  # type: ignore[attr-defined]
    vectors.update(zip(ids, out, strict=True))
    if on_progress:
        on_progress(len(ids))
