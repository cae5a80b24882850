"""The indexing pipeline: the same pixels as open_clip's own transform, every id mapped to its own vector, bad files
counted and left out, whatever the batch and slice sizes."""

from __future__ import annotations

import io
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest
from PIL import Image

from imagesvc.search.clip import TINY_MODEL, ClipSpec, Encoder, _import_open_clip
from imagesvc.search.embedding_pipeline import Plan, embed_images, plan_for
from imagesvc.search.prepare import prepare_one

MEAN = np.array([0.48145466, 0.4578275, 0.40821073])[:, None, None]
STD = np.array([0.26862954, 0.26130258, 0.27577711])[:, None, None]


def encoded(width: int, height: int, fmt: str = "JPEG", mode: str = "RGB", seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    small = (rng.random((height // 8 + 1, width // 8 + 1, 3)) * 255).astype("uint8")
    image = Image.fromarray(small).resize((width, height), Image.Resampling.BICUBIC).convert(mode)
    buf = io.BytesIO()
    image.save(buf, fmt, quality=90)
    return buf.getvalue()


@pytest.fixture(scope="module")
def encoder() -> Encoder:
    enc = Encoder(ClipSpec(TINY_MODEL, "random", "cpu", 1))
    enc.load()
    return enc


@pytest.mark.parametrize(
    ("width", "height", "fmt", "mode", "tolerance"),
    [
        (300, 200, "JPEG", "RGB", 2.5),  # a landscape thumbnail
        (200, 300, "JPEG", "RGB", 2.5),  # a portrait one
        (640, 480, "JPEG", "CMYK", 2.5),
        (300, 300, "PNG", "RGBA", 0.01),  # lossless: exactly the reference
        (64, 40, "PNG", "L", 0.01),  # smaller than the model: enlarged like the reference
    ],
)
def test_prepared_pixels_match_open_clips_transform(
    encoder: Encoder, width: int, height: int, fmt: str, mode: str, tolerance: float
) -> None:
    _, _, reference = _import_open_clip().create_model_and_transforms(TINY_MODEL, pretrained=None)
    data = encoded(width, height, fmt, mode)
    ours = prepare_one(data, encoder.image_size).astype(float)
    ref = reference(Image.open(io.BytesIO(data)).convert("RGB")).numpy()
    ref = ((ref * STD + MEAN) * 255).transpose(1, 2, 0)
    assert ours.shape == ref.shape == (encoder.image_size, encoder.image_size, 3)
    assert np.abs(ours - ref).mean() <= tolerance


@pytest.mark.parametrize(("batch", "decoders"), [(4, 1), (16, 2), (64, 2)])
async def test_every_id_gets_its_own_vector_and_bad_files_are_counted(
    encoder: Encoder, batch: int, decoders: int
) -> None:
    blobs: dict[str, bytes | None] = {f"img-{i}": encoded(120 + 7 * i, 90 + 5 * i, seed=i) for i in range(37)}
    blobs["missing"] = None
    blobs["garbage"] = b"\xff\xd8 not really a jpeg"
    blobs["truncated"] = encoded(300, 200)[:200]
    ids = sorted(blobs)

    async def read(iid: str) -> bytes | None:
        return blobs[iid]

    plan = Plan(batch=batch, decoders=decoders, gpu_decode=False)
    pool = ProcessPoolExecutor(decoders, mp_context=multiprocessing.get_context("spawn"))
    seen: list[int] = []
    try:
        vectors, failed = await embed_images(ids, read, encoder, plan, pool, on_progress=seen.append)
    finally:
        pool.shutdown()
    assert failed == 3
    assert set(vectors) == {i for i in ids if i.startswith("img-")}
    assert sum(seen) == len(ids)  # progress accounts for every image, failed ones included
    for iid in ("img-0", "img-17", "img-36"):
        alone = encoder.encode_pixels(prepare_one(blobs[iid], encoder.image_size)[None])  # type: ignore[arg-type]
        assert np.allclose(vectors[iid], alone[0], atol=1e-4), iid


def test_the_plan_follows_the_device() -> None:
    gpu, cpu = plan_for("cuda", decoders=16), plan_for("cpu", decoders=2)
    assert (gpu.batch, gpu.gpu_decode) == (256, True)
    assert (cpu.batch, cpu.gpu_decode, cpu.decoders) == (64, False, 2)
    assert plan_for("cpu", batch=32).batch == 32  # IMAGESVC_CLIP_BATCH wins when set
    assert gpu.slice == gpu.batch  # one nvJPEG call per batch
    cpu16 = plan_for("cpu", decoders=16, batch=256)
    assert 8 <= cpu16.slice <= 64 and cpu16.slice * cpu16.decoders <= cpu16.batch  # every decoder gets a share


def test_batched_resampling_matches_the_cpu_path() -> None:
    """The GPU path's one-op resize and centre crop (run here on the CPU) agrees with Pillow's, image by image."""
    import torch

    from imagesvc.search.gpu_decode import _resize_crop

    shapes = [(300, 200), (200, 300), (300, 300), (240, 300), (300, 181)]
    blobs = [encoded(w, h, "PNG", seed=n) for n, (w, h) in enumerate(shapes)]
    images = [torch.from_numpy(np.array(Image.open(io.BytesIO(b)).convert("RGB"))).permute(2, 0, 1) for b in blobs]
    batch = _resize_crop(images, 224).permute(0, 2, 3, 1).numpy().astype(float)
    for n, blob in enumerate(blobs):
        reference = prepare_one(blob, 224).astype(float)
        assert batch[n].shape == reference.shape
        assert np.abs(batch[n] - reference).mean() <= 3.0, shapes[n]
