"""Hostile masters through ``render_page``: lying headers refused before allocating, orientations, ICC on every mode."""

from __future__ import annotations

import struct
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from imagesvc.errors import ImageRejected
from imagesvc.imaging import TierSpec
from imagesvc.imaging.refusals import reason_of
from imagesvc.imaging.renditions import render_page
from tests.imaging import hostile
from tests.imaging.awkward import encode, icc_profile, swapped_rgb_profile
from tests.imaging.helpers import MARK, pixels

SPEC = TierSpec(max_pixels=60_000_000)
CASES = list(hostile.cases(SPEC.max_pixels))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_hostile_master_gets_its_outcome(case: hostile.Case) -> None:
    if case.reason is not None:
        with pytest.raises(ImageRejected) as info:
            render_page(case.data, SPEC, MARK, [])
        assert reason_of(info.value) == case.reason, info.value.message
        return
    page = render_page(case.data, SPEC, MARK, [])
    assert (page.width, page.height) == case.size
    for tier, longest in (("full", max(case.size)), ("display", 2000), ("thumb", 300)):
        # The page's own size (the clean rendition's record: a full tier copied from a JPEG master keeps its EXIF
        # orientation in its bytes); the public tier is that, upright, or larger by a mark strip outside the page.
        size = (page.clean[tier].width, page.clean[tier].height)
        assert max(size) == min(longest, max(case.size)), tier
        assert (size[0] >= size[1]) == (case.size[0] >= case.size[1]), tier
        public = pixels(page.public[tier].data)
        assert public.size == (page.public[tier].width, page.public[tier].height), tier
        assert public.width >= size[0] and public.height >= size[1], tier
        assert public.width == size[0] or public.height == size[1], tier


def test_a_15000_square_jpeg_header_over_800x600_of_data_is_refused_without_allocating() -> None:
    """The reported case: 22 KiB claiming 15000x15000 was published as a grey page after taking 2.4 GiB."""
    data = hostile.lying_header("JPEG", (800, 600), (15000, 15000))
    script = (
        "import sys\nfrom PIL import Image\nImage.MAX_IMAGE_PIXELS = 250_000_000  # as ingest sets it\n"
        "from imagesvc.imaging import TierSpec\nfrom imagesvc.imaging.renditions import render_page\n"
        "from imagesvc.imaging.refusals import reason_of\nfrom imagesvc.errors import ImageRejected\n"
        "from tests.imaging.helpers import MARK\n"
        "try:\n    render_page(sys.stdin.buffer.read(), TierSpec(), MARK, [])\n    print('accepted')\n"
        "except ImageRejected as exc:\n    print(reason_of(exc))\n"
        # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the forking parent across exec.
        "print(next(int(x.split()[1]) // 1024 for x in open('/proc/self/status') if x.startswith('VmHWM')))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], input=data, capture_output=True, check=True)
    outcome, peak_mib = done.stdout.decode().split()
    assert outcome == "truncated"
    assert int(peak_mib) < 300  # one 15000x15000 RGB buffer alone is 858 MiB


def test_a_short_baseline_jpeg_scan_is_refused_even_when_the_lie_is_small() -> None:
    data = hostile.lying_header("JPEG", (800, 600), (800, 640))
    with pytest.raises(ImageRejected) as info:
        render_page(data, SPEC, None, [])
    assert reason_of(info.value) == "truncated"


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP", "TIFF"])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_orientation_puts_the_stored_top_left_where_exif_says(fmt: str, orientation: int) -> None:
    page = render_page(hostile.oriented(fmt, orientation), SPEC, None, [])
    img = np.asarray(pixels(page.clean["display"].data), dtype=np.int16)  # full may be the JPEG itself
    h, w = img.shape[:2]
    # Where the stored top-left corner shows once upright, for each EXIF orientation.
    corner = {1: (0, 0), 2: (0, w - 1), 3: (h - 1, w - 1), 4: (h - 1, 0), 5: (0, 0), 6: (0, w - 1), 7: (h - 1, w - 1)}
    y, x = corner.get(orientation, (h - 1, 0))
    y, x = min(max(y, 5), h - 6), min(max(x, 5), w - 6)
    assert abs(img[y, x] - (255, 0, 0)).max() < 40, (fmt, orientation, img[y, x])


def _gray_profile(gamma: float, name: bytes) -> bytes:
    """An ICC v2 grey profile with a pure gamma tone curve."""
    desc = b"desc\0\0\0\0" + struct.pack(">I", len(name) + 1) + name + b"\0" * 9 + b"\0\0\0" + b"\0" * 67
    tags = {
        b"desc": desc,
        b"wtpt": b"XYZ \0\0\0\0" + struct.pack(">iii", 63190, 65536, 54061),
        b"kTRC": b"curv\0\0\0\0" + struct.pack(">IH", 1, round(gamma * 256)),
        b"cprt": b"text\0\0\0\0generated for tests\0",
    }
    return icc_profile(b"GRAY", tags)


def _linear_named_srgb() -> bytes:
    """sRGB primaries with a gamma 1.0 curve, described as 'sRGB linear': not sRGB, whatever it says."""
    raw = bytearray(swapped_rgb_profile())
    red, blue = raw.index(b"rXYZ"), raw.index(b"bXYZ")
    roff, boff = (struct.unpack(">I", raw[p + 4 : p + 8])[0] for p in (red, blue))
    raw[roff : roff + 20], raw[boff : boff + 20] = raw[boff : boff + 20], raw[roff : roff + 20]
    raw = raw.replace(b"swapped-primaries test RGB", b"sRGB linear (gamma 1.0)   ")
    return bytes(
        raw.replace(b"curv\0\0\0\0" + struct.pack(">IH", 1, 0x0233), b"curv\0\0\0\0" + struct.pack(">IH", 1, 0x0100))
    )


def _centre(data: bytes) -> tuple[int, ...]:
    page = render_page(data, SPEC, None, [])
    img = pixels(page.clean["display"].data)
    return img.getpixel((img.width // 2, img.height // 2))


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "P"])
def test_a_swapping_rgb_profile_is_applied_on_every_rgb_mode(mode: str) -> None:
    img = Image.new("RGB", (64, 48), (255, 0, 0))
    if mode == "RGBA":
        img = img.convert("RGBA")
    elif mode == "P":
        img = img.convert("P")
    red, green, blue = _centre(encode(img, "PNG", icc_profile=swapped_rgb_profile()))
    assert blue > 200 and red < 60, (mode, red, green, blue)


@pytest.mark.parametrize("mode", ["L", "LA"])
def test_a_grey_profile_is_applied_on_grey_modes(mode: str) -> None:
    img = Image.new(mode, (64, 48), 100 if mode == "L" else (100, 255))
    plain = _centre(encode(img, "PNG"))
    tagged = _centre(encode(img, "PNG", icc_profile=_gray_profile(1.0, b"linear grey")))
    assert abs(plain[0] - 100) <= 2
    assert tagged[0] > 140, tagged  # linear 100/255 is about 170 in sRGB


def test_a_profile_named_srgb_is_converted_by_what_it_does() -> None:
    img = Image.new("RGB", (64, 48), (100, 100, 100))
    tagged = _centre(encode(img, "PNG", icc_profile=_linear_named_srgb()))
    assert tagged[0] > 140, tagged


def test_the_real_srgb_profile_changes_nothing() -> None:
    from PIL import ImageCms

    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    img = Image.new("RGB", (64, 48), (100, 150, 200))
    assert _centre(encode(img, "PNG", icc_profile=srgb)) == _centre(encode(img, "PNG"))


def test_an_mpo_keeps_its_first_frame_byte_for_byte() -> None:
    data = hostile.mpo()
    page = render_page(data, SPEC, None, [])
    full = page.clean["full"].data
    assert data.startswith(full) and full.endswith(b"\xff\xd9") and len(full) < len(data)
    assert pixels(full).size == (800, 600)  # a JPEG (its MPF segment still names the frames it came with)


def test_a_jpeg_carrying_a_thumbnail_jpeg_in_an_app_segment_is_read_as_itself() -> None:
    """Camera files hold an EXIF thumbnail (a whole JPEG, SOS and EOI included) before the image's own scan."""
    page = encode(hostile.noisy((800, 600)), quality=85)
    thumb = encode(hostile.noisy((160, 120), seed=2), quality=70)
    segment = b"\xff\xef" + struct.pack(">H", len(thumb) + 2) + thumb
    data = page[:2] + segment + page[2:]
    rendered = render_page(data, SPEC, MARK, [])
    assert (rendered.width, rendered.height) == (800, 600)
    assert rendered.clean["full"].data == data  # still copied byte for byte
