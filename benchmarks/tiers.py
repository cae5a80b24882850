"""Benchmark tier derivation on a generated 24-megapixel JPEG against vipsthumbnail and naive Pillow, in one run.

Run: ``.venv/bin/python benchmarks/tiers.py [--repeat N]``. Prints medians, ratios and PSNR; nothing is asserted.
``--mark-example PATH`` writes an example of a marked display tier instead (the examples in docs/provenance.md
come from ``benchmarks/visible_mark.py --screenshots docs``).
"""

from __future__ import annotations

import argparse
import io
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from imagesvc.imaging import MarkSpec, TierSpec
from imagesvc.imaging.renditions import render_page
from imagesvc.imaging.tiers import decode, encode_jpeg, resize_to

SPEC = TierSpec()
MARK = MarkSpec(
    "Rare Books Digital Library", "https://books.example.org/b/ars-moriendi-1475/p/17", "Bayerische Staatsbibliothek"
)
BOXES = [(0.08, 0.1, 0.4, 0.35), (0.55, 0.15, 0.35, 0.3), (0.1, 0.6, 0.8, 0.3)]


def make_master(width: int = 6000, height: int = 4000) -> bytes:
    """A deterministic generated page (gradients, noise, text, shapes) encoded as JPEG q92."""
    rng = np.random.default_rng(2024)
    y, x = np.ogrid[0:height, 0:width]
    base = np.empty((height, width, 3), dtype=np.int16)
    base[..., 0] = 225 + (20 * np.sin(x / 700.0) * np.cos(y / 500.0)).astype(np.int16)
    base[..., 1] = 212 + (18 * np.cos(x / 900.0)).astype(np.int16) + (y // 400).astype(np.int16)
    base[..., 2] = 180 + (25 * np.sin((x + y) / 1100.0)).astype(np.int16)
    base += rng.integers(-12, 13, (height, width, 1), dtype=np.int16)
    img = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(img)
    line = "Incipit liber de arte moriendi, capitulum primum de temptationibus morientium. " * 3
    for row, top in enumerate(range(120, height - 120, 70)):
        draw.text((200, top), f"{row:03d} {line}", fill=(45, 30, 20), font_size=44)
    for i in range(40):
        x0, y0 = int(rng.integers(0, width - 600)), int(rng.integers(0, height - 600))
        colour = tuple(int(v) for v in rng.integers(30, 200, 3))
        draw.ellipse((x0, y0, x0 + 80 + 13 * i, y0 + 60 + 11 * i), outline=(30, 20, 10), fill=colour, width=6)
    out = io.BytesIO()
    img.save(out, "JPEG", quality=92)
    return out.getvalue()


def write_mark_example(path: Path) -> int:
    """Render the marked display tier of a generated 2000x1400 page (text column, picture, dark block) to ``path``."""
    img = Image.new("RGB", (2000, 1400), (236, 224, 196))
    draw = ImageDraw.Draw(img)
    for row, top in enumerate(range(120, 1400, 60)):
        draw.text((160, top), f"{row:02d} incipit liber de arte moriendi, capitulum", fill=(40, 30, 25), font_size=30)
    rng = np.random.default_rng(4)
    for _ in range(12):
        x0, x1 = sorted(rng.integers(1150, 1850, 2).tolist())
        y0, y1 = sorted(rng.integers(150, 650, 2).tolist())
        fill = tuple(int(v) for v in rng.integers(20, 160, 3))
        draw.ellipse((x0, y0, x1 + 2, y1 + 2), outline=(40, 30, 25), fill=fill, width=4)
    draw.rectangle((1100, 1100, 1899, 1399), fill=(35, 28, 22))  # a dark area under the band
    out = io.BytesIO()
    img.save(out, "JPEG", quality=92)
    data = render_page(out.getvalue(), SPEC, MARK, []).public["display"].data
    path.write_bytes(data)
    return len(data)


def median_time(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm-up: page cache, font loading, imports
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def psnr(a: Image.Image, b: Image.Image) -> float:
    mse = float(((np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)) ** 2).mean())
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def naive(master: bytes) -> tuple[bytes, bytes]:
    img = Image.open(io.BytesIO(master)).convert("RGB")
    out = []
    for size in ((2000, 1333), (300, 200)):
        buf = io.BytesIO()
        img.resize(size, Image.Resampling.LANCZOS).save(buf, "JPEG", quality=SPEC.quality, optimize=True)
        out.append(buf.getvalue())
    return out[0], out[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--mark-example", type=Path, help="only write the marked display example to this path")
    args = parser.parse_args()
    if args.mark_example:
        print(f"wrote {args.mark_example}: {write_mark_example(args.mark_example):,} bytes")
        return
    vips = shutil.which("vipsthumbnail")
    master = make_master()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "master.jpg")
        path.write_bytes(master)

        def run_vips() -> None:
            for size, name in ((2000, "display.jpg"), (300, "thumb.jpg")):
                subprocess.run([vips, str(path), "-s", str(size), "-o", f"{tmp}/{name}[Q=88]"], check=True)

        ours = median_time(lambda: render_page(master, SPEC, None, []), args.repeat)
        naive_s = median_time(lambda: naive(master), args.repeat)
        vips_s = median_time(run_vips, args.repeat) if vips else float("nan")
        marked_s = median_time(lambda: render_page(master, SPEC, MARK, []), max(3, args.repeat // 2))
        full_s = median_time(lambda: render_page(master, SPEC, MARK, BOXES), max(3, args.repeat // 2))
        page = render_page(master, SPEC, None, [])
        reference = Image.open(io.BytesIO(master)).convert("RGB").resize((2000, 1333), Image.Resampling.LANCZOS)
        # The same resampling path render_page takes, before JPEG encoding, isolates the draft-decode shortcut.
        resampled = resize_to(decode(master, SPEC, longest=SPEC.display)[1], (2000, 1333))
        display = Image.open(io.BytesIO(page.clean["display"].data)).convert("RGB")
        encoded_ref = Image.open(io.BytesIO(encode_jpeg(reference, SPEC.quality))).convert("RGB")
        vips_psnr = psnr(Image.open(f"{tmp}/display.jpg").convert("RGB"), reference) if vips else float("nan")
    print(f"master: 6000x4000 JPEG, {len(master) / 1e6:.1f} MB; median of {args.repeat} runs")
    print(f"(a) ours, display+thumb (render_page, no mark, no boxes): {ours * 1000:7.0f} ms")
    print(f"(b) vipsthumbnail, display+thumb (2 subprocesses):         {vips_s * 1000:7.0f} ms")
    print(f"(c) naive Pillow, full decode + LANCZOS 2000 and 300:      {naive_s * 1000:7.0f} ms")
    print(f"ours/vips = {ours / vips_s:.2f} (target <= 1.2)   naive/ours = {naive_s / ours:.2f} (target >= 1.5)")
    print(f"PSNR, our resampled display pixels vs full-decode LANCZOS:  {psnr(resampled, reference):.1f} dB (>= 35)")
    print(f"PSNR, our display JPEG vs that reference, unencoded:         {psnr(display, reference):.1f} dB")
    print(f"PSNR, the reference itself JPEG-encoded (q88) vs unencoded:  {psnr(encoded_ref, reference):.1f} dB")
    print(f"PSNR, vipsthumbnail display JPEG vs the reference:          {vips_psnr:.1f} dB")
    print(f"render_page with marks, no illustrations: {marked_s * 1000:7.0f} ms")
    print(f"render_page with marks and 3 illustrations: {full_s * 1000:7.0f} ms")


if __name__ == "__main__":
    main()
