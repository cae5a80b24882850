"""The side of the patch search by image draws its descriptors from (``MatchParams.patch``): what a larger one
buys on line art, the narrow descriptors the guided fits still compare (``Features.fine``), and an index that never
mixes two patches' descriptors."""

from __future__ import annotations

import io
import math
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
from PIL import Image

from fixtures.woodcuts import QUERY_SCAN, crop_box, degrade, from_block, library, render, to_block
from imagesvc.catalog import Catalog
from imagesvc.search import feature_index, features
from imagesvc.search.block_index import current_digest, load_blocks, params, sync_blocks
from imagesvc.search.feature_index import hamming
from imagesvc.search.features import STORED_SIDE, decode_reduced, extract, extract_query, grey_reduced, near_pairs
from imagesvc.search.match_params import DEFAULT as DEFAULT_PARAMS
from imagesvc.search.match_params import MatchParams
from imagesvc.storage.local import LocalStore
from tests.library import copy_library

SIZE = 60
DEFAULT = features.DESCRIPTOR_PATCH
P19, P41 = MatchParams.for_patch(19), MatchParams.for_patch(41)


class Copy(NamedTuple):
    data: Path
    catalog: Catalog
    store: LocalStore


@pytest.fixture
async def copied(demo_library: dict[str, Any], tmp_path: Path) -> AsyncIterator[Copy]:
    """A private copy of the demo library's data dir, its catalog and its store (closed after the test)."""
    data = copy_library(demo_library["data"], tmp_path / "data")
    catalog, store = Catalog(data / "catalog.sqlite3"), LocalStore(data / "store")
    try:
        yield Copy(data, catalog, store)
    finally:
        catalog.close()
        await store.close()


def _stored(ill: Any) -> Image.Image:
    buf = io.BytesIO()
    render(ill, SIZE).save(buf, "JPEG", quality=90)
    return decode_reduced(buf.getvalue(), STORED_SIDE)


def _true_pairs_kept(patch: int) -> tuple[int, int]:
    """Over a third of each side of the first printing of every reused block: the true pairs (a query keypoint and
    its twin, the keypoint of another printing of its block at the place the generator says it shows, found at the
    query's orientation and about three pyramid levels lower, the crop being shown about 1.7 times larger), and how
    many of them no descriptor of any other illustration of the library comes nearer than the twin (the pairs an
    index over many look-alikes still returns)."""
    lib = library(SIZE)
    stored = [extract(_stored(ill), patch=patch) for ill in lib]
    everything = np.concatenate([f.desc for f in stored])
    owner = np.repeat(np.arange(len(lib)), [len(f.desc) for f in stored])
    pairs = kept = 0
    for q in {ill.block: ill for ill in reversed(lib) if ill.kind == "printing"}.values():
        picture = degrade(q, SIZE, "crop33")
        side, keypoints = DEFAULT_PARAMS.query_side, DEFAULT_PARAMS.query_keypoints
        query = features._extract_grey(grey_reduced(picture, side), keypoints, patch)
        assert query.shape is not None
        left, top, _, _ = crop_box(q, SIZE, "crop33")
        uv = to_block(q, SIZE, QUERY_SCAN, query.xy * (picture.width / query.size[0]) + [left, top])
        for other in (ill for ill in lib if ill.block == q.block and ill.number != q.number):
            mine = stored[other.number]
            assert mine.shape is not None
            where = (from_block(other, SIZE, other.side, uv) * min(1.0, STORED_SIDE / other.side)).astype(np.float32)
            at, on = near_pairs(where, mine.xy, 3.0)
            turn = (query.shape[at, 0].astype(int) - mine.shape[on, 0] + 128) % 256 - 128
            levels = query.shape[at, 1].astype(int) - mine.shape[on, 1]
            twins = (np.abs(turn) <= 12) & (np.abs(levels - 3) <= 1)
            at, on = at[twins], on[twins]
            apart = hamming(query.desc[at], mine.desc[on])
            for a in np.unique(at):  # each query keypoint with its nearest twin
                twin = apart[at == a].min()
                pairs += 1
                kept += int(hamming(query.desc[a], everything[owner != other.number]).min() >= twin)
    return pairs, kept


def test_a_larger_patch_loses_fewer_of_a_small_crops_true_pairs_to_other_pictures() -> None:
    """On crops to a third of each side, the descriptors of 41 px patches keep more of the true pairs nearest to
    their twins than ORB's own 19 px (the look-alikes of other pictures crowd them less); the test fails with the
    patch unchanged."""
    pairs19, kept19 = _true_pairs_kept(19)
    pairs41, kept41 = _true_pairs_kept(41)
    assert pairs19 == pairs41 > 200  # the same keypoints and twins, described from other patches
    assert kept41 > 1.3 * kept19, (pairs19, kept19, pairs41, kept41)


def test_params_for_a_patch_carry_its_distances_and_refuse_a_patch_nobody_chose_them_for() -> None:
    """41 px is the default; its keypoints are 19 px's, described twice: for the index, and for the fits, whose
    distances stay 19 px's. Describing with one patch changes nothing for a later extraction of another."""
    assert DEFAULT == 41 and DEFAULT_PARAMS == P41 and P41.max_hamming == 60 and P41.guided_hamming == 64
    picture = _stored(library(SIZE)[0])
    before = extract(picture, patch=19)
    assert before.fine is None and before.fit_desc is before.desc
    assert (P19.max_hamming, P19.sigma, P19.guided_hamming, P19.strong_hamming) == (40, 16.0, 64, 32)
    after = extract(picture)
    assert (P41.max_hamming, P41.sigma, P41.guided_hamming, P41.strong_hamming) == (60, 24.0, 64, 32)
    assert np.array_equal(before.xy, after.xy) and not np.array_equal(before.desc, after.desc)
    assert after.fine is not None and np.array_equal(after.fine, before.desc)
    with pytest.raises(ValueError, match="no distances chosen for a 31 px patch"):
        MatchParams.for_patch(31)
    assert np.array_equal(extract(picture, patch=19).desc, before.desc)
    assert np.array_equal(extract_query(picture, P19).first_look().desc, extract(picture, 800, 1500, 19).desc)


def test_the_fits_compare_narrow_descriptors_so_a_small_crop_lists_no_recut() -> None:
    """With the index's 41 px descriptors in the guided fits too, a third of each side of some printing lists a
    copy of its block recut by another hand, or a picture of another block, as the same block; with the 19 px
    ones the fits compare (``Features.fine``), none does, and each crop still finds its block."""
    lib = library(SIZE)
    stored = [extract(_stored(ill)) for ill in lib]
    assert all(f.fine is not None for f in stored)
    total = sum(len(f.desc) for f in stored)
    narrow = feature_index.build_index([stored], total, keep_desc=True)
    wide = feature_index.build_index([[replace(f, fine=None) for f in stored]], total, keep_desc=True)
    assert narrow.fine is not None and wide.fine is None
    wrong = {"narrow": 0, "wide": 0}
    for ill in (ill for ill in lib if ill.kind == "printing"):
        query = extract_query(degrade(ill, SIZE, "crop33"))
        block = {i.number for i in lib if i.block == ill.block}
        for name, index in (("narrow", narrow), ("wide", wide)):
            found = {c.number for c in index.search(query)}
            wrong[name] += len(found - block)
            if name == "narrow":
                assert found & block, ill.number
    assert wrong["narrow"] == 0 < wrong["wide"], wrong


async def test_an_index_of_another_patch_is_extracted_and_made_again_and_its_files_removed(copied: Copy) -> None:
    """Features files say their patch: changing it extracts every illustration again (none of the old descriptors
    enters the new index), removes the old files once the new index is current, and changes the index's digest;
    going back extracts again. Files written before the patch was said are the first patch's (19 px); files of 41
    px descriptors without the fits' 19 px ones are extracted again too. A process describing its queries with
    another patch than the index's refuses to load it."""
    data, catalog, store = copied
    shards = data / "featureindex" / "features"
    first, summary = await sync_blocks(data, catalog, store, full=True, workers=1, match_params=P19)
    for path in shards.glob("*.npz"):  # as written before the patch was said
        with np.load(path) as old:
            kept = {k: old[k] for k in old.files if k != "describer"}
        with open(path, "wb") as f:
            np.savez(f, **kept)
    _, same = await sync_blocks(data, catalog, store, workers=1, match_params=P19)
    assert same.extracted == 0 and current_digest(data) == first.digest
    old_files = set(shards.glob("*.npz"))
    assert params().endswith("-patch41-fit19") and params(P41) == params()
    larger, again = await sync_blocks(data, catalog, store, workers=2)  # spawned workers are told the patch
    assert again.extracted == summary.extracted and again.kept == 0
    assert larger.digest != first.digest and current_digest(data) == larger.digest
    assert not old_files & set(shards.glob("*.npz")) and list(shards.glob("*.npz"))
    _, still = await sync_blocks(data, catalog, store, workers=1)  # the new patch's files are kept
    assert still.extracted == 0 and still.kept == summary.extracted
    loaded = load_blocks(data)
    assert loaded is not None
    expected = extract(decode_reduced((await store.get(_display(catalog, loaded.ids[0]))).data, STORED_SIDE))
    assert np.array_equal(loaded.features.features_of(0).desc, expected.desc)
    assert expected.fine is not None and np.array_equal(loaded.features.features_of(0).fine, expected.fine)
    for path in shards.glob("*.npz"):  # as 41 px descriptors were written before the fits' were kept
        with np.load(path) as old:
            kept = {k: old[k] for k in old.files if k not in ("describer", "fine")}
        with open(path, "wb") as f:
            np.savez(f, **kept, describer=np.array("-patch41"))
    again_digest, refit = await sync_blocks(data, catalog, store, workers=1)
    assert refit.extracted == summary.extracted and again_digest.digest == larger.digest
    with pytest.raises(ValueError, match="holds 41 px descriptors fitted with 19 px ones and this process"):
        load_blocks(data, P19)  # a node describing its queries otherwise never answers from it
    back, summary19 = await sync_blocks(data, catalog, store, workers=1, match_params=P19)  # spawned, told 19
    assert summary19.extracted == summary.extracted and back.digest == first.digest
    narrow = extract(decode_reduced((await store.get(_display(catalog, back.ids[0]))).data, STORED_SIDE), patch=19)
    assert np.array_equal(back.features.features_of(0).desc, narrow.desc) and back.features.fine is None
    assert params(P19) == "orb-800-600-v3"  # the first patch's, as indexes made before the patch was said
    _, settled = await sync_blocks(data, catalog, store, workers=1, match_params=P19)
    assert settled.extracted == 0


def _display(catalog: Catalog, iid: str) -> str:
    tiers = catalog.renditions([iid])[iid]
    return tiers["display"]["clean_key"]


@pytest.mark.parametrize(
    ("said", "refused"),
    [
        ("orb-800-600-v3-patch41-v4", "unreadable descriptors"),
        ("orb-800-600-v3-patch", "unreadable descriptors"),
        ("orb-800-600-v3-patch\u00b2", "unreadable descriptors"),
        ("orb-800-600-v3-patch41-fit", "unreadable descriptors"),
        ("orb-800-600-v3-patch41", "holds 41 px descriptors alone"),  # made before the fits' were kept
        ("orb-800-600-v3-patch41-fit23", "holds 41 px descriptors fitted with 23 px ones"),
        (None, "holds 19 px descriptors"),  # none said: the first patch, as before it could be said
    ],
)
async def test_an_index_whose_patch_cannot_be_read_is_refused(copied: Copy, said: str | None, refused: str) -> None:
    """``current.json`` naming a patch unreadably (hand-edited, or written by a later version), or patches other
    than this process's, is refused rather than compare its queries with descriptors of unknown patches."""
    import json

    data, catalog, store = copied
    await sync_blocks(data, catalog, store, full=True, workers=1)
    pointer = data / "featureindex" / "current.json"
    pointer.write_text(json.dumps({**json.loads(pointer.read_text()), "params": said}))
    with pytest.raises(ValueError, match=refused):
        load_blocks(data)
    pointer.write_text(json.dumps({**json.loads(pointer.read_text()), "params": params()}))
    assert load_blocks(data) is not None


async def test_a_node_upgraded_past_its_index_says_why_it_finds_nothing(copied: Copy) -> None:
    """A node of this version over an index of 19 px descriptors alone (made before 41 px was the default) keeps
    no index in service, and says so where search by image reports its state: which index, and what to run."""
    from imagesvc.search.by_image import matcher_for
    from imagesvc.services import Services
    from tests.library import settings_for

    data, catalog, store = copied
    services = Services(settings_for(data, search_wait=30), catalog, store)
    old, _ = await sync_blocks(data, catalog, store, full=True, workers=1, match_params=P19)
    matcher = matcher_for(services)
    assert await matcher.ready() is None
    state = matcher.state()
    assert old.digest in state and "holds 19 px descriptors" in state and "run `imagesvc index`" in state


async def test_a_published_index_of_other_descriptors_is_refused_and_the_state_says_why(
    copied: Copy, tmp_path: Path
) -> None:
    """A node that follows published indexes (the only source, as on PostgreSQL) and is handed one of 19 px
    descriptors alone keeps none in service and says why; one of this version's descriptors it loads, the fits'
    descriptors with it."""
    import json
    import shutil

    from imagesvc.search.by_image import matcher_for
    from imagesvc.search.published import publish
    from imagesvc.services import Services
    from tests.library import settings_for

    indexer, catalog, store = copied
    made, _ = await sync_blocks(indexer, catalog, store, workers=1)
    old = tmp_path / "old"  # the same index as the former version named it: 19 px alone
    shutil.copytree(indexer / "featureindex", old / "featureindex", ignore=shutil.ignore_patterns("features"))
    pointer = old / "featureindex" / "current.json"
    pointer.write_text(json.dumps({**json.loads(pointer.read_text()), "params": "orb-800-600-v3"}))
    (old / "featureindex" / f"index-{made.digest}.fine.npy").unlink()
    for source, model in ((old, "orb-800-600-v3"), (indexer, params())):
        node_catalog = Catalog(indexer / "catalog.sqlite3")
        node = Services(settings_for(tmp_path / f"node-{source.name}", search_wait=30), node_catalog, store)
        try:
            assert await publish(catalog, store, "blocks", source, model=model, illustrations=1) is not None
            matcher = matcher_for(node)
            assert matcher.follower is not None
            matcher.follower.only = True
            got = await matcher.ready()
            if source is old:
                assert got is None
                assert "was refused" in matcher.state() and "holds 19 px descriptors" in matcher.state()
            else:
                assert got is not None and isinstance(got.features.fine, np.memmap)
                assert np.array_equal(got.features.fine, made.features.fine)
        finally:
            node_catalog.close()


async def test_an_index_that_lost_a_file_is_made_again_by_the_next_index_run(copied: Copy) -> None:
    """``imagesvc index`` over an index whose fits' descriptors (or any file) went missing makes it again from the
    features files, extracting nothing, instead of failing on it for as long as the catalog does not change."""
    data, catalog, store = copied
    first, _ = await sync_blocks(data, catalog, store, workers=1)
    (data / "featureindex" / f"index-{first.digest}.fine.npy").unlink()
    with pytest.raises(FileNotFoundError):
        load_blocks(data)
    again, summary = await sync_blocks(data, catalog, store, workers=1)
    assert again.digest == first.digest and summary.extracted == 0
    loaded = load_blocks(data)
    assert loaded is not None and np.array_equal(loaded.features.fine, first.features.fine)


def test_candidates_held_to_the_best_fit_by_its_pairs_its_stretch_and_its_agreement() -> None:
    """``_confirmed``: a candidate is kept beside the best fit (most tight pairs) with a fifth of its pairs, a
    stretch within ``CONFIRM_STRETCH`` of its stretch, and ``CONFIRM_AGREE`` of its own proposed pairs in the tight
    fit; a best fit whose stretch is infinite (a degenerate homography) holds no one to its shape."""
    from imagesvc.search.feature_index import Candidate
    from imagesvc.search.guided_fit import NO_FIT, Fit
    from imagesvc.search.printings import PrintingSearch

    stored = [extract(_stored(ill)) for ill in library(SIZE)[:6]]
    index = feature_index.build_index([stored], sum(len(f.desc) for f in stored), keep_desc=True)
    query = stored[0]
    move = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])

    def kept(*fits: Fit) -> list[int]:
        found = [Candidate(n, 20, 30, 1.0, 20, 4, move) for n in range(len(fits))]
        search = PrintingSearch(index, query, None, DEFAULT_PARAMS)
        search.fits = dict(enumerate(fits))
        return [c.number for c in search._confirmed(found)]

    best = Fit(proposed=120, tight=100, cells=30, stretch=1.02, strong=60)
    assert kept(best, Fit(40, 30, 12, 1.03, 10)) == [0, 1]  # a printing: 0.3 of the best, same stretch, 0.75 agree
    assert kept(best, Fit(40, 19, 12, 1.03, 10)) == [0]  # under a fifth of the best's pairs
    assert kept(best, Fit(40, 30, 12, 1.30, 10)) == [0]  # a stretch of its own: another block
    assert kept(best, Fit(106, 48, 19, 1.03, 16)) == [0]  # 0.45 of its pairs agree: a recut
    assert kept(best, Fit(40, 30, 12, math.inf, 10)) == [0]
    degenerate = best._replace(stretch=math.inf)
    assert kept(degenerate, Fit(40, 30, 12, 1.03, 10)) == [0, 1]  # no shape to hold to, and no error
    assert kept(NO_FIT, NO_FIT._replace(proposed=3)) == [0, 1]  # no fit at all: as the index found them


def test_a_candidate_the_best_block_does_not_vouch_for_must_fit_as_cleanly_as_its_printings() -> None:
    """``_clean_as_the_block``: beside the best fit and a candidate that agrees with it whole to whole (here a copy
    of the same picture), a candidate of another picture is kept only if as large a share of its pairs keeps to
    the tight fit and as large a share of those are near twins as of the block's; with no such sibling among them,
    nothing is measured against and all are kept."""
    from imagesvc.search.feature_index import Candidate
    from imagesvc.search.guided_fit import Fit
    from imagesvc.search.printings import PrintingSearch

    pictures = [extract(_stored(ill)) for ill in library(SIZE)[:4]]
    stored = [pictures[0], pictures[0], pictures[3]]  # 0 and 1 one block; 2 another picture
    index = feature_index.build_index([stored], sum(len(f.desc) for f in stored), keep_desc=True)
    move = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])

    def kept(*held: tuple[int, Fit]) -> list[int]:
        pairs = [(Candidate(n, f.tight, f.proposed, 1.0, 20, 4, move), f) for n, f in held]
        return [
            c.number
            for c in PrintingSearch(index, stored[0], None, DEFAULT_PARAMS)._clean_as_the_block(pairs, held[0][1])
        ]

    best = Fit(proposed=100, tight=90, cells=30, stretch=1.0, strong=60)  # 0.90 kept, 0.67 near twins
    sibling = Fit(100, 80, 28, 1.0, 48)  # 0.80, 0.60: lowers the floors
    assert kept((0, best), (1, sibling), (2, Fit(40, 33, 10, 1.0, 21))) == [0, 1, 2]  # 0.83, 0.64: as clean
    assert kept((0, best), (1, sibling), (2, Fit(40, 33, 10, 1.0, 14))) == [0, 1]  # 0.42 near twins: a recut's
    assert kept((0, best), (1, sibling), (2, Fit(60, 33, 10, 1.0, 21))) == [0, 1]  # 0.55 kept to the fit
    assert kept((0, best), (2, Fit(60, 33, 10, 1.0, 14))) == [0, 2]  # no sibling: no block to measure against


async def test_doctor_says_whether_search_by_image_can_answer_from_the_feature_index(
    copied: Copy, tmp_path: Path
) -> None:
    """``imagesvc doctor`` on a data dir: no index (warn), an index of 19 px descriptors alone, as the former
    version made (fail: every node refuses it, and what to run), one of this version's (ok)."""
    from imagesvc.doctor import run_checks
    from tests.library import settings_for

    data, catalog, store = copied

    async def finding(where: Path = data) -> Any:
        (found,) = [f for f in await run_checks(settings_for(where)) if f.check == "feature index"]
        return found

    none = await finding(tmp_path / "empty")
    assert none.level == "warn" and "none made: run `imagesvc index`" in none.message
    old, _ = await sync_blocks(data, catalog, store, workers=1, match_params=P19)
    refused = await finding()
    assert refused.level == "fail" and old.digest in refused.message
    assert "holds 19 px descriptors" in refused.message and "`imagesvc index`" in refused.message
    await sync_blocks(data, catalog, store, workers=1)
    ready = await finding()
    assert ready.level == "ok" and ready.message.endswith("made with orb-800-600-v3-patch41-fit19")
