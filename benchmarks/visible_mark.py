"""The visible mark against page content: ink it changes, legibility by OCR, and the re-bake rate, in one run.

Run: ``.venv/bin/python benchmarks/visible_mark.py [--pages 210] [--seed 48] [--ocr] [--rebake 6]``.

On generated display-tier pages whose text or plates run to the edges (``fixtures/edge_pages.py``: full pages,
narrow margins, spreads, right-to-left, tall plates, marginalia, ordinary margins), for today's reference (the
full-width band at the foot, as drawn before this placement) and the placement in ``imaging/placement.py``:
the share of the clean page's ink pixels (40 grey levels or more below the paper, its 90th percentile) that the
marked page, encoded as a public tier, changes by more than 24 grey levels; where the mark went. ``--ocr`` reads
each mark back with tesseract from the display tier re-encoded at JPEG quality 70 (the box cut out, turned upright,
inverted to dark on light and doubled in size) and scores character accuracy against the text drawn. ``--sweep``
tries other placement constants. ``--rebake N`` times ``marks.rebake`` of N pages at a 12-megapixel full tier.
``--screenshots docs`` writes the example images of docs/provenance.md instead.
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import shutil
import statistics
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from fixtures.edge_pages import KINDS, page, pages
from imagesvc.imaging import MarkSpec, TierSpec
from imagesvc.imaging import marks as m
from imagesvc.imaging.placement import PLACEMENT, MarkPlacement
from imagesvc.imaging.renditions import render_page
from imagesvc.imaging.tiers import decode, encode_jpeg, fit_size, resize_to

SPEC = TierSpec()
MARK = MarkSpec(
    "Rare Books Digital Library", "https://books.example.org/b/ars-moriendi-1475/p/17", "Bayerische Staatsbibliothek"
)


def jpeg(img: Image.Image, quality: int = SPEC.quality) -> Image.Image:
    return decode(encode_jpeg(img, quality), SPEC)[1]


def band_reference(img: Image.Image, mark: MarkSpec) -> Image.Image:
    """Today's mark, for reference: the full-width translucent band along the foot (the layout it used)."""
    out = img.copy()
    width, height = out.size
    nominal = max(m.MIN_FONT, min(120, round(width * 0.014)))
    for lines in m.mark_lines(mark):
        length, depth = m._box(lines, nominal)
        if length <= width:
            break
    overlay = m._overlay(tuple(lines), nominal, width, depth, m._BAND_RGBA)
    box = (0, height - depth, width, height)
    out.paste(Image.alpha_composite(out.crop(box).convert("RGBA"), overlay).convert("RGB"), box[:2])
    return out


def ink_changed(clean: Image.Image, marked: Image.Image) -> float:
    """The share of ``clean``'s ink pixels that ``marked`` (its page area, top left) changes by more than 24 levels."""
    a = np.asarray(clean.convert("L"), dtype=np.int16)
    b = np.asarray(marked.convert("L"), dtype=np.int16)[: a.shape[0], : a.shape[1]]
    ink = a <= np.percentile(a, 90) - 40
    return float((ink & (np.abs(a - b) > 24)).sum() / max(1, ink.sum()))


def _edit_distance(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def mark_crop(marked: Image.Image, clean_size: tuple[int, int], placement: m.Placement) -> Image.Image:
    """The mark's box cut from a marked display tier, upright."""
    width, height = clean_size
    if placement.edge == "strip":  # the band, past the page's edge repeated to the next block boundary
        return marked.crop((0, m._block_end(height), width, marked.height))
    if placement.edge == "strip-right":
        return marked.crop((m._block_end(width), 0, marked.width, height)).transpose(Image.Transpose.ROTATE_270)
    left, top, right, bottom = placement.box
    crop = marked.crop((round(left * width), round(top * height), round(right * width), round(bottom * height)))
    if placement.edge == "right":
        return crop.transpose(Image.Transpose.ROTATE_270)
    if placement.edge == "left":
        return crop.transpose(Image.Transpose.ROTATE_90)
    return crop


def ocr_accuracy(crop: Image.Image, lines: tuple[str, ...]) -> float:
    """Character accuracy (1 - edit distance / length) of tesseract's reading of ``crop`` against ``lines``."""
    prepared = ImageOps.invert(crop.convert("L")).resize((crop.width * 2, crop.height * 2), Image.Resampling.LANCZOS)
    buffer = io.BytesIO()
    prepared.save(buffer, "PNG")
    run = subprocess.run(
        ["tesseract", "stdin", "stdout", "--psm", "6", "-l", "eng"],
        input=buffer.getvalue(),
        capture_output=True,
        check=True,
        env={**os.environ, "OMP_THREAD_LIMIT": "1"},
    )
    read = " ".join(run.stdout.decode().split())
    want = " ".join(" ".join(lines).split())
    return max(0.0, 1 - _edit_distance(read, want) / len(want))


def measure(n: int, seed: int, params: MarkPlacement, ocr: bool) -> dict[str, list]:
    out: dict[str, list] = {"kind": [], "reference": [], "placed": [], "edge": [], "ocr": [], "font": []}
    for kind, generated in pages(n, seed):
        clean = jpeg(generated)
        placement = m.plan_mark(clean, MARK, params)
        assert placement is not None
        marked = jpeg(m.draw_mark(clean, placement))
        out["kind"].append(kind)
        out["reference"].append(ink_changed(clean, jpeg(band_reference(clean, MARK))))
        out["placed"].append(ink_changed(clean, marked))
        out["edge"].append(placement.edge)
        out["font"].append(placement.font * clean.width)
        if ocr:
            seventy = jpeg(marked, 70)
            out["ocr"].append(ocr_accuracy(mark_crop(seventy, clean.size, placement), placement.lines))
    return out


def report(found: dict[str, list], ocr: bool) -> None:
    print(f"{'kind':<11} {'pages':>5} {'band max %':>10} {'placed max %':>12} {'margin':>6} {'strip':>5}", end="")
    print(f" {'OCR mean':>8} {'OCR min':>7}" if ocr else "")
    for kind in (*KINDS, "all"):
        idx = [i for i, k in enumerate(found["kind"]) if kind in ("all", k)]
        row = (
            f"{kind:<11} {len(idx):>5} {100 * max(found['reference'][i] for i in idx):>10.3f}"
            f" {100 * max(found['placed'][i] for i in idx):>12.4f}"
            f" {sum(not found['edge'][i].startswith('strip') for i in idx):>6}"
            f" {sum(found['edge'][i].startswith('strip') for i in idx):>5}"
        )
        if ocr:
            scores = [found["ocr"][i] for i in idx]
            row += f" {100 * statistics.mean(scores):>7.1f}% {100 * min(scores):>6.1f}%"
        print(row)
    over = sum(p > 0.001 for p in found["placed"])
    print(f"pages over 0.1% ink changed: {over}; display font px: {min(found['font']):.0f}-{max(found['font']):.0f}")


def rebake_rate(n: int, seed: int) -> None:
    """Seconds per page of ``marks.rebake`` (decode, plan, draw, encode: full, display, thumb) on this one core."""
    cleans = []
    for _kind, generated in pages(n, seed + 1):
        full = generated.resize(
            (3000, round(3000 * generated.height / generated.width))
            if generated.width < generated.height
            else (4200, round(4200 * generated.height / generated.width)),
            Image.Resampling.BICUBIC,
        )
        display = resize_to(full, fit_size(*full.size, SPEC.display))
        thumb = resize_to(display, fit_size(*full.size, SPEC.thumb))
        cleans.append(
            {t: encode_jpeg(i, SPEC.quality) for t, i in (("full", full), ("display", display), ("thumb", thumb))}
        )
    start = time.process_time()
    for clean in cleans:
        m.rebake(clean, MARK, SPEC)
    per = (time.process_time() - start) / n
    print(
        f"rebake: {per * 1000:.0f} ms CPU per page (full ~12.6 MP + display + thumb) = {1 / per:.2f} pages/s per core;"
        f" 4.5 M pages: {4.5e6 * per / 3600:.0f} core-hours"
    )


def write_screenshots(folder: Path, seed: int) -> None:
    """The marked display tier (through ``render_page``) of a full page, a narrow-margin page and an illustration cut
    from a plate to its edges, and the same full page with the faint mark, as JPEGs in ``folder``."""
    plate = page("plate", seed)
    shots = {
        "mark-full-page.jpg": (page("full", seed), [], MARK),
        "mark-narrow-margin.jpg": (page("narrow", seed), [], MARK),
        "mark-illustration.jpg": (plate, [(0.1, 0.1, 0.8, 0.45)], MARK),
        "mark-margin.jpg": (page("ordinary", seed), [], MARK),
        "faint-mark-example.jpg": (page("ordinary", seed), [], replace(MARK, faint=True)),
    }
    for name, (shown, boxes, mark) in shots.items():
        rendered = render_page(encode_jpeg(shown, 92), SPEC, mark, boxes)
        public = rendered.illustrations[0].public if boxes else rendered.public
        img = decode(public["display"].data, SPEC)[1]
        img.thumbnail((1100, 1100), Image.Resampling.LANCZOS)  # half the display tier: the docs' size
        img.save(folder / name, "JPEG", quality=85)
        print(f"wrote {folder / name} ({img.width}x{img.height})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=210)
    parser.add_argument("--seed", type=int, default=48)
    parser.add_argument("--ocr", action="store_true")
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--sweep-pages", type=int, default=70)
    parser.add_argument("--rebake", type=int, default=0)
    parser.add_argument("--screenshots", type=Path, help="only write the example images into this folder")
    args = parser.parse_args()
    if args.screenshots:
        write_screenshots(args.screenshots, args.seed)
        return
    print(f"machine: {platform.machine()}, {os.cpu_count()} cpus; python {platform.python_version()}")
    if args.ocr and not shutil.which("tesseract"):
        raise SystemExit("--ocr needs tesseract (Debian: tesseract-ocr)")
    started = time.perf_counter()
    report(measure(args.pages, args.seed, PLACEMENT, args.ocr), args.ocr)
    print(f"({time.perf_counter() - started:.0f} s)")
    if args.sweep:  # on the first --sweep-pages pages, without OCR
        for change in (
            {},  # the chosen constants
            {"ink_delta": 24},
            {"ink_delta": 64},
            {"guard": 0.0, "guard_min_px": 0},
            {"min_font_share": 0.6},
            {"paper_percentile": 75.0},
        ):
            found = measure(args.sweep_pages, args.seed, replace(PLACEMENT, **change), False)
            over = sum(p > 0.001 for p in found["placed"])
            margins = sum(not e.startswith("strip") for e in found["edge"])
            print(
                f"sweep {change}: max {100 * max(found['placed']):.4f}%, over 0.1%: {over}, in a margin: {margins},"
                f" smallest font {min(found['font']):.0f} px"
            )
    if args.rebake:
        rebake_rate(args.rebake, args.seed)


if __name__ == "__main__":
    main()
