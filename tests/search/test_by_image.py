"""Search by image on a small generated library of woodcuts (fixtures/woodcuts.py): each degradation a reader brings
finds the block's printings, and a copy recut by another hand is never the same block."""

from __future__ import annotations

import io
import itertools
from dataclasses import replace

import numpy as np
import pytest
from PIL import Image

from fixtures.woodcuts import (
    QUERY_SCAN,
    Illustration,
    crop_box,
    degrade,
    from_block,
    library,
    render,
    scan,
    to_block,
)
from imagesvc.search.block_index import BlockIndex
from imagesvc.search.by_image import match_picture
from imagesvc.search.feature_index import FeatureIndex, build_index
from imagesvc.search.features import STORED_SIDE, Features, decode_reduced, extract, extract_query
from imagesvc.search.match_params import DEFAULT

QUERY_SIDE, QUERY_KEYPOINTS, COARSER_LEVELS = DEFAULT.query_side, DEFAULT.query_keypoints, DEFAULT.coarser_levels

SIZE = 60


def _stored(ill: Illustration) -> Image.Image:
    """As ``imagesvc index`` reads it: a stored JPEG decoded reduced."""
    buf = io.BytesIO()
    render(ill, SIZE).save(buf, "JPEG", quality=90)
    return decode_reduced(buf.getvalue(), STORED_SIDE)


@pytest.fixture(scope="module")
def woodcuts() -> tuple[list[Illustration], BlockIndex]:
    lib = library(SIZE)
    feats = [extract(_stored(ill)) for ill in lib]
    index = build_index([feats], sum(len(f.desc) for f in feats), keep_desc=True)
    ids = [str(ill.number) for ill in lib]
    return lib, BlockIndex(ids, ids, index, "test")


def _printings(lib: list[Illustration], block: int) -> set[str]:
    return {str(i.number) for i in lib if i.block == block}


def _queries(lib: list[Illustration]) -> list[Illustration]:
    """The first printing of every block printed in several books."""
    seen: dict[int, Illustration] = {}
    for ill in lib:
        if ill.kind == "printing":
            seen.setdefault(ill.block, ill)
    return list(seen.values())


def _found(index: BlockIndex, lib: list[Illustration], ill: Illustration, how: str) -> list[str]:
    return [m.id for m in match_picture(index, degrade(ill, SIZE, how))]


@pytest.mark.parametrize("how", ["crop50", "rot10", "rot15", "rescan", "worn"])
def test_a_degraded_printing_finds_every_printing_of_its_block_and_nothing_else(
    woodcuts: tuple[list[Illustration], BlockIndex], how: str
) -> None:
    lib, index = woodcuts
    for ill in _queries(lib):
        found = _found(index, lib, ill, how)
        assert set(found) == _printings(lib, ill.block), (how, ill.number)


def test_a_phone_photo_finds_most_printings_and_no_other(woodcuts: tuple[list[Illustration], BlockIndex]) -> None:
    lib, index = woodcuts
    hits = 0
    for ill in _queries(lib):
        found = _found(index, lib, ill, "phone")
        truth = _printings(lib, ill.block)
        assert set(found) <= truth, ill.number
        hits += len(set(found) & truth)
    assert hits >= 0.8 * sum(len(_printings(lib, q.block)) for q in _queries(lib))


def test_a_third_of_each_side_of_any_printing_finds_its_block_and_never_another_block(
    woodcuts: tuple[list[Illustration], BlockIndex],
) -> None:
    """Every printing, not only the first of each block: its third of each side finds printings of its block
    (the weak pairs of a crop verified for their number, two near printings that agree), and 95% of them."""
    lib, index = woodcuts
    printings = [ill for ill in lib if ill.kind == "printing"]
    hits = 0
    for ill in printings:
        found = set(_found(index, lib, ill, "crop33"))
        truth = _printings(lib, ill.block)
        assert found and found <= truth, ill.number
        hits += len(found)
    assert hits >= 0.95 * sum(len(_printings(lib, ill.block)) for ill in printings)


@pytest.mark.parametrize("how", ["crop33", "crop50", "rot15", "phone"])
def test_pairs_that_agree_on_a_place_rank_a_printing_first(
    woodcuts: tuple[list[Illustration], BlockIndex], how: str
) -> None:
    """Candidates chosen by their pairs that put the query's centre at one place in them (``BY_PLACE``), with no
    other list: the first three hold a printing of the block for every block, however the query was taken."""
    lib, index = woodcuts
    for ill in _queries(lib):
        query = extract(degrade(ill, SIZE, how), QUERY_SIDE, QUERY_KEYPOINTS)
        placed = index.features.candidates(query, None, 0, 0, 3)
        assert {str(c.number) for c in placed} & _printings(lib, ill.block), (how, ill.number)


def _near_twins(index: BlockIndex, lib: list[Illustration], ill: Illustration, query: Features, width: int) -> int:
    """Stored keypoints of the printings of ``ill``'s block that some row of ``query`` (a third of each side of
    ``ill``, ``width`` px wide) describes within 16 bits at the place the generator says it shows (3 px)."""
    left, top, _, _ = crop_box(ill, SIZE, "crop33")
    uv = to_block(ill, SIZE, QUERY_SCAN, query.xy * (width / query.size[0]) + [left, top])
    twins = 0
    for p in _printings(lib, ill.block):
        stored, printing = index.features.features_of(int(p)), lib[int(p)]
        where = from_block(printing, SIZE, printing.side, uv) * min(1.0, STORED_SIDE / printing.side)
        at = np.hypot(*(stored.xy[None, :, :] - where[:, None, :]).transpose(2, 0, 1)) < 3
        bits = np.unpackbits(query.desc[:, None, :] ^ stored.desc[None, :, :], axis=2).sum(2)
        twins += int(((bits <= 16) & at).any(0).sum())
    return twins


def test_a_small_query_is_looked_at_again_and_finds_nearer_twins_at_the_same_places(
    woodcuts: tuple[list[Illustration], BlockIndex],
) -> None:
    """A third of each side yields half the keypoint budget; the picture reduced and described again fills the
    rest with other descriptors of the same keypoints, and more of the printings' keypoints then have a twin
    within 16 bits (what a large library's neighbours still return). A full picture is looked at once."""
    lib, index = woodcuts
    once = again = 0
    for ill in _queries(lib):
        picture = degrade(ill, SIZE, "crop33")
        query = extract_query(picture)
        first = query.first_look()
        assert query.keypoint is not None and query.shape is not None and first.shape is not None
        assert len(first.desc) < len(query.desc) <= QUERY_KEYPOINTS
        assert np.array_equal(first.desc, extract(picture, QUERY_SIDE, QUERY_KEYPOINTS).desc)
        further = query.keypoint[len(first.desc) :]
        assert np.array_equal(query.xy[len(first.desc) :], first.xy[further])  # on the first look's keypoints
        assert (query.shape[len(first.desc) :, 1] >= COARSER_LEVELS[0]).all()  # levels in the first's terms
        once += _near_twins(index, lib, ill, first, picture.width)
        again += _near_twins(index, lib, ill, query, picture.width)
    assert again >= 1.3 * once > 0, (once, again)
    full = extract_query(degrade(_queries(lib)[0], SIZE, "rescan"))
    assert full.keypoint is None and len(full.desc) == QUERY_KEYPOINTS


def test_an_inverted_file_index_finds_every_printing_with_expansion_probing_fewer_lists(
    woodcuts: tuple[list[Illustration], BlockIndex],
) -> None:
    """The test library as a large library holds it (an inverted file, not an exact index): a rotated printing
    finds every printing of its block, though expansion probes only ``expand_nprobe`` lists; and that number does
    reach faiss (one list probed answers otherwise than the index's own eight)."""
    lib, _ = woodcuts
    feats = [extract(_stored(ill)) for ill in lib]
    everything = np.concatenate([f.desc for f in feats])
    ivf = build_index([feats], len(everything), train=everything, keep_desc=True, flat_until=0)
    assert type(ivf.index).__name__ == "IndexBinaryIVF" and DEFAULT.expand_nprobe < DEFAULT.nprobe
    ids = [str(ill.number) for ill in lib]
    index = BlockIndex(ids, ids, ivf, "test")
    for ill in _queries(lib):
        assert set(_found(index, lib, ill, "rot15")) == _printings(lib, ill.block), ill.number
    sample = everything[:200]
    _, own = ivf._search(sample, 50, 0)
    _, one = ivf._search(sample, 50, 1)
    assert not np.array_equal(own, one)


def test_a_recut_copy_is_not_the_same_block(woodcuts: tuple[list[Illustration], BlockIndex]) -> None:
    lib, index = woodcuts
    recuts = [i for i in lib if i.kind == "recut"]
    assert recuts
    for recut in recuts:
        originals = _printings(lib, recut.original)
        found = _found(index, lib, recut, "rescan")
        assert found[:1] == [str(recut.number)] and not set(found) & originals
        printing = next(i for i in lib if i.block == recut.original)
        assert str(recut.number) not in _found(index, lib, printing, "rescan")


def test_a_picture_with_no_features_and_a_restricted_search_answer_plainly(
    woodcuts: tuple[list[Illustration], BlockIndex],
) -> None:
    lib, index = woodcuts
    blank = Image.new("RGB", (400, 300), (230, 220, 200))
    assert match_picture(index, blank) == []
    ill = _queries(lib)[0]
    picture = degrade(ill, SIZE, "rescan")
    only = sorted(_printings(lib, ill.block))[:1]
    assert [m.id for m in match_picture(index, picture, set(only))] == only
    assert match_picture(index, picture, set()) == []


def test_every_match_carries_its_evidence(woodcuts: tuple[list[Illustration], BlockIndex]) -> None:
    lib, index = woodcuts
    matches = match_picture(index, degrade(_queries(lib)[0], SIZE, "worn"))
    assert matches and all(0 < m.correlation <= 1 and m.inliers <= m.pairs for m in matches)
    assert [m.inliers for m in matches] == sorted((m.inliers for m in matches), reverse=True)
    assert np.all([m.distance == m.pairs - m.inliers for m in matches])


# found / true printings over the sweep (measured: crop33 0.929, crop50 1.0, phone 1.0): an empty answer fails
SWEEP_RECALL = {"crop33": 0.9, "crop50": 0.98, "phone": 0.98}


@pytest.mark.slow
@pytest.mark.parametrize("how", ["crop33", "crop50", "phone"])
def test_wherever_a_crop_is_taken_no_recut_or_other_block_is_listed(
    woodcuts: tuple[list[Illustration], BlockIndex], how: str
) -> None:
    """Each printing cropped at three more places than the tests above (``degrade``'s seeds): every illustration
    listed is a printing of the block, and nearly every printing is found (``SWEEP_RECALL``). At some of these
    places a recut cut close to its original fits the crop with as many pairs and cells as a printing (23 of 35
    pairs in 8 cells), but less cleanly than every printing that agrees with the best whole to whole
    (``_clean_as_the_block``)."""
    lib, index = woodcuts
    found_true = true = 0
    for seed in range(1, 4):
        for ill in (i for i in lib if i.kind == "printing"):
            found = {m.id for m in match_picture(index, degrade(ill, SIZE, how, seed))}
            printings = _printings(lib, ill.block)
            assert found <= printings, (how, seed, ill.number, found)
            found_true, true = found_true + len(found), true + len(printings)
    print(f"{how}: {found_true} of {true} printings found ({found_true / true:.3f})")
    assert found_true >= SWEEP_RECALL[how] * true, (how, found_true, true)


@pytest.mark.slow
def test_a_quarter_of_a_printing_is_corroborated_by_a_printing_its_own_search_finds(
    woodcuts: tuple[list[Illustration], BlockIndex],
) -> None:
    """A quarter of each side, at 16 places of two blocks' printings: where one printing fits it closely but too
    thinly for the guided rule, and its block's other printings are not among the query's candidates, a printing
    that its own search finds and that fits the query through it makes it the block (``_corroborated``). Without
    that step these crops find 38 fewer printings; with it they list nothing else."""
    lib, index = woodcuts
    without = FeatureIndex(index.features.index, index.features.xy, replace(DEFAULT, corroborate_from=0),
                           index.features.shape, index.features.desc, index.features.fine)  # fmt: skip
    gained = 0
    for ill in (i for i in lib if i.kind == "printing" and i.block in (1, 3)):
        picture = scan(ill, SIZE, QUERY_SCAN)
        w, h = picture.size
        for gx, gy in itertools.product(range(4), repeat=2):
            x, y = gx * w / 4, gy * h / 4
            query = extract_query(picture.crop((round(x), round(y), round(x + w / 4), round(y + h / 4))))
            alone = {c.number for c in without.search(query)}
            found = {c.number for c in index.features.search(query)}
            truth = {int(n) for n in _printings(lib, ill.block)}
            assert alone <= found and found - alone <= truth, (ill.number, gx, gy, alone, found)
            gained += len(found - alone)
    assert gained >= 30, gained


def test_a_close_fit_counts_only_when_enough_of_its_pairs_are_near_twins() -> None:
    """``Fit.close`` on fits measured where it decides (``CLOSE_STRONG``: near twins for 0.3 of the pairs): third
    crops' printings at 200,000 illustrations (14 to 27 tight pairs, most of them near twins) are close; the demo
    library's sun, drawn twice, against the middle third of an engraving (an arc and a line: 17 pairs over 6
    cells, 4 near twins), whose other printing came as close through it (22 pairs, 5 near twins), is not."""
    from imagesvc.search.guided_fit import Fit

    p = DEFAULT
    assert Fit(20, 18, 6, 1.019, 16).close(p) and Fit(16, 14, 5, 1.091, 13).close(p)
    assert Fit(17, 14, 6, 1.034, 11).close(p) and Fit(30, 27, 7, 1.050, 20).close(p)
    assert not Fit(20, 17, 6, 1.032, 4).close(p) and not Fit(22, 22, 6, 1.091, 5).close(p)
    assert not Fit(20, 11, 6, 1.0, 11).close(p) and not Fit(20, 14, 4, 1.0, 14).close(p)  # too few pairs, cells
    assert not Fit(20, 14, 6, 1.2, 14).close(p)  # stretched: another aspect
