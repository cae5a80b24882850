"""The local-feature index behind search by image: computed by ``imagesvc index`` on every core, resumable,
published atomically under a name that says its content, and loaded (never rebuilt) by a serving node.

Layout under ``DATA_DIR/featureindex/``:

- ``features/<digest>.npz``: ORB features of a batch of illustrations, keyed by content hash. Written as each batch
  is done, so an interrupted run resumes where it stopped, and an illustration whose content did not change is never
  read or extracted again.
- ``index-<digest>.faiss`` and ``index-<digest>.npz``: the searchable index and its illustration ids, keypoint
  positions and content hashes; ``<digest>`` is a hash of the ids, content hashes and parameters it was made from.
- ``index-<digest>.desc.npy``: every stored descriptor again, in keypoint order (32 bytes each), memory-mapped by a
  serving node: a query reads those of the few illustrations it verifies again or expands from.
- ``index-<digest>.fine.npy``: where those are of a wider patch than ORB's own 19 px, the 19 px ones too, which the
  guided fits compare (``features.FIT_PATCH``), likewise.
- ``current.json``: which index is current (replaced atomically; a reader sees the old index or the new one).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import logging
import multiprocessing
import os
import re
import time
import zipfile
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from imagesvc.search.feature_index import FLAT_UNTIL, FeatureIndex, build_index, chunks
from imagesvc.search.features import FIT_PATCH, STORED_KEYPOINTS, STORED_SIDE, Features, decode_reduced, extract
from imagesvc.search.match_params import DEFAULT, MatchParams

__all__ = ["BlockIndex", "BlockIndexSummary", "load_blocks", "mismatch", "params", "sync_blocks", "write_rows"]

log = logging.getLogger("imagesvc.search.blocks")
FOLDER = "featureindex"
BATCH = 256  # illustrations per features file
TRAIN_SAMPLE = 400_000  # descriptors the inverted file's centroids are trained on
# v2: each keypoint's orientation and level kept; v3: every descriptor also kept beside the index
# (``index-<digest>.desc.npy``, memory-mapped) for guided matching and expansion (``FeatureIndex.search``)
PARAMS = f"orb-{STORED_SIDE}-{STORED_KEYPOINTS}-v3"
SOURCE_TIERS = ("display", "thumb", "full")  # display (2,000 px) decoded by DCT scaling to about 1,000 px


def _describer(patch: int) -> str:
    """The descriptors' patches, as features files and the index's parameters say them: the index's patch and the
    guided fits' (``features.FIT_PATCH``), or nothing for ORB's own 19 px alone (as files written before either
    could change). Files of other patches are extracted again, an index of others made again
    (``MatchParams.patch``)."""
    return "" if patch == FIT_PATCH else f"-patch{patch}-fit{FIT_PATCH}"


def _describer_of(made_with: str) -> str | None:
    """What an index's ``params`` say of its descriptors (``_describer``; an index that says no params: ``""``);
    ``None`` where they say it unreadably."""
    if not made_with:
        return ""
    found = re.fullmatch(r"orb-[0-9]+-[0-9]+-v[0-9]+((?:-patch[0-9]{1,4}(?:-fit[0-9]{1,4})?)?)", made_with)
    return found[1] if found else None


def _said(describer: str) -> str:
    patch = re.fullmatch(r"-patch([0-9]+)(?:-fit([0-9]+))?", describer)
    if patch is None:
        return "19 px descriptors"
    return f"{patch[1]} px descriptors" + (f" fitted with {patch[2]} px ones" if patch[2] else " alone")


def mismatch(made_with: str, match_params: MatchParams = DEFAULT) -> str | None:
    """Why an index made with ``made_with`` (its ``params``; none said: ``""``) cannot answer queries described
    with ``match_params``, or ``None`` when it can: its descriptors and the queries' would not compare."""
    made, here = _describer_of(made_with), _describer(match_params.patch)
    if made == here:
        return None
    said = _said(made) if made is not None else f"unreadable descriptors ({made_with[:80]!r})"
    return f"holds {said} and this process describes queries with {_said(here)}"


def params(match_params: MatchParams = DEFAULT) -> str:
    """What an index is made with (its digest's, ``current.json``'s and a published index's ``model``)."""
    return PARAMS + _describer(match_params.patch)


@dataclass
class BlockIndex:
    """``features.xy[n]`` and the faiss ids ``n << 12 | k`` belong to illustration ``ids[n]``."""

    ids: list[str]
    content: list[str]
    features: FeatureIndex
    digest: str


@dataclass
class BlockIndexSummary:
    illustrations: int
    extracted: int
    kept: int
    failed: int
    descriptors: int
    seconds: float
    cpu_seconds: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        return (
            f"block features: {self.illustrations} illustrations ({self.extracted} extracted, {self.kept} kept, "
            f"{self.failed} failed), {self.descriptors} descriptors in {self.seconds:.1f}s"
        )


def _folder(data_dir: Path) -> Path:
    return Path(data_dir) / FOLDER


def _key(iid: str, content: str) -> str:
    return content or f"id:{iid}"


def load_blocks(data_dir: Path, match_params: MatchParams = DEFAULT) -> BlockIndex | None:
    """The current index of ``data_dir`` (``None`` when none was made), searched with ``match_params``; blocking:
    call it off the event loop. ``ValueError`` when it holds descriptors of another patch than those."""
    import faiss

    folder = _folder(data_dir)
    try:
        pointer = json.loads((folder / "current.json").read_text())
    except FileNotFoundError:
        return None
    digest = pointer["digest"]
    if why := mismatch(str(pointer.get("params") or ""), match_params):  # every answer would be noise
        raise ValueError(f"the feature index {digest} {why}: run `imagesvc index` here")
    with open(folder / f"index-{digest}.npz", "rb") as f, np.load(f, allow_pickle=False) as data:
        ids, content = data["ids"].tolist(), data["content"].tolist()
        counts, xy = data["counts"], data["xy"]
        shape = data["shape"] if "shape" in data.files else None  # an index made before shapes were kept
    starts = np.concatenate([[0], np.cumsum(counts)])
    per = [xy[starts[n] : starts[n + 1]] for n in range(len(ids))]
    index = faiss.read_index_binary(str(folder / f"index-{digest}.faiss"))
    desc = fine = None
    if (folder / f"index-{digest}.desc.npy").exists():  # an index made before v3 has none: no expansion
        desc = np.load(folder / f"index-{digest}.desc.npy", mmap_mode="r", allow_pickle=False)
        if _describer(match_params.patch):  # said by the params, so written with it: a missing file is damage
            fine = np.load(folder / f"index-{digest}.fine.npy", mmap_mode="r", allow_pickle=False)
    features = FeatureIndex(index, per, match_params, shape=shape, desc=desc, fine=fine)
    return BlockIndex(ids, content, features, digest)


def current_digest(data_dir: Path) -> str | None:
    try:
        return json.loads((_folder(data_dir) / "current.json").read_text())["digest"]
    except (FileNotFoundError, ValueError, KeyError):
        return None


Extracted = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]  # xy, desc, shape, fine


def _extract_bytes(data: bytes, patch: int) -> Extracted:
    """Worker: decode reduced and extract with descriptors of ``patch`` px (top-level, so a spawned process can run
    it)."""
    f = extract(decode_reduced(data, STORED_SIDE), patch=patch)
    return f.xy, f.desc, f.shape if f.shape is not None else np.zeros((len(f.xy), 2), np.uint8), f.fine


def _read_shards(
    folder: Path, wanted: set[str], describer: str, stale: list[Path] | None = None
) -> dict[str, tuple[str, int]]:
    """Where each wanted content key's features are: (features file, position in it). Files of another
    ``describer`` are passed over and listed in ``stale``."""
    out: dict[str, tuple[str, int]] = {}
    for path in sorted(folder.glob("*.npz")):
        try:
            # our own file object: np.load leaves a file it opened itself open when the archive is cut short
            with open(path, "rb") as f, np.load(f, allow_pickle=False) as data:
                keys = data["keys"].tolist()
                said = str(data["describer"]) if "describer" in data.files else ""
                if "shape" not in data.files or said != describer:  # made by an earlier version: again
                    if stale is not None:
                        stale.append(path)
                    continue
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:  # cut short by a killed run: made again
            log.warning("ignoring unreadable %s: %s", path, exc)
            continue
        for k, key in enumerate(keys):
            if key in wanted:
                out[key] = (path.name, k)
    return out


def _write_shard(folder: Path, keys: list[str], feats: list[Extracted], describer: str) -> None:
    # named by its keys and its patch: another patch's file of the same batch is never written over (and then
    # removed as stale); the first patch's names are as they always were
    digest = hashlib.sha256(("\n".join(keys) + describer).encode()).hexdigest()[:20]
    tmp = folder / f".{digest}.{os.getpid()}.tmp"
    fine = {}
    if describer:  # every keypoint's fit descriptor too (an empty picture's: none)
        fine["fine"] = np.concatenate([np.zeros((0, 32), np.uint8)] + [f for _, d, _, f in feats if len(d)])
    with open(tmp, "wb") as f:
        np.savez(
            f,
            keys=np.array(keys, dtype=str),
            counts=np.array([len(x) for x, _, _, _ in feats], np.int32),
            xy=np.concatenate([x for x, *_ in feats]).astype(np.float32) if feats else np.zeros((0, 2), np.float32),
            desc=np.concatenate([d for _, d, _, _ in feats]) if feats else np.zeros((0, 32), np.uint8),
            shape=np.concatenate([s for _, _, s, _ in feats]) if feats else np.zeros((0, 2), np.uint8),
            describer=np.array(describer),
            **fine,
        )
    os.replace(tmp, folder / f"{digest}.npz")


def _load_shard(path: Path) -> tuple[list[str], list[Features]]:
    with open(path, "rb") as f, np.load(f, allow_pickle=False) as data:
        keys, counts, xy, desc, shape = (data[k] for k in ("keys", "counts", "xy", "desc", "shape"))
        fine = data["fine"] if "fine" in data.files else None
    starts = np.concatenate([[0], np.cumsum(counts)])
    feats = [
        Features(xy[a:b], desc[a:b], (0, 0), shape[a:b], fine=fine[a:b] if fine is not None else None)
        for a, b in itertools.pairwise(starts)
    ]
    return keys.tolist(), feats


async def _read(store: Any, tiers: dict[str, dict[str, Any]]) -> bytes | None:
    for tier in SOURCE_TIERS:
        if tier in tiers:
            try:
                return (await store.get(tiers[tier]["clean_key"])).data
            except Exception as exc:  # one unreadable object is one failed illustration, not a failed job
                log.warning("cannot read %s: %s", tiers[tier]["clean_key"], exc)
                return None
    return None


def _build(
    folder: Path,
    ids: list[str],
    keys: list[str],
    where: dict[str, tuple[str, int]],
    digest: str,
    match_params: MatchParams,
) -> BlockIndex:
    """Assemble the faiss index from the features files, write it under its digest and make it current."""
    import faiss

    by_file: dict[str, list[Features]] = {}
    for name in sorted({where[k][0] for k in keys}):
        by_file[name] = _load_shard(folder / "features" / name)[1]
    feats = [by_file[where[k][0]][where[k][1]] for k in keys]
    total = sum(len(f.desc) for f in feats)
    train = None
    if total > FLAT_UNTIL:
        rng = np.random.default_rng(0)
        pick = rng.choice(len(feats), size=min(len(feats), TRAIN_SAMPLE // 100 + 1), replace=False)
        train = np.concatenate([feats[int(n)].desc for n in pick])
    # a batch at a time: no second copy of all codes
    index = build_index(chunks(feats, 4096), total, train, params=match_params)
    index.desc = write_rows(folder / f"index-{digest}.desc.npy", (f.desc for f in feats), total)
    if _describer(match_params.patch):
        if any(f.fine is None for f in feats):  # never the index's own descriptors in their place
            raise ValueError("features files of this describer without its fit descriptors")
        index.fine = write_rows(
            folder / f"index-{digest}.fine.npy", (f.fine for f in feats if f.fine is not None), total
        )
    del by_file
    faiss.write_index_binary(index.index, str(folder / f".index-{digest}.faiss.tmp"))
    os.replace(folder / f".index-{digest}.faiss.tmp", folder / f"index-{digest}.faiss")
    tmp = folder / f".index-{digest}.npz.tmp"
    with open(tmp, "wb") as f:
        np.savez(
            f,
            ids=np.array(ids, dtype=str),
            content=np.array(keys, dtype=str),
            counts=np.array([len(x) for x in index.xy], np.int32),
            xy=np.concatenate(index.xy) if index.xy else np.zeros((0, 2), np.float16),
            shape=index.shape if index.shape is not None else np.zeros((0, 2), np.uint8),
        )
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / f"index-{digest}.npz")
    pointer = folder / f".current.{os.getpid()}.tmp"
    pointer.write_text(
        json.dumps({"digest": digest, "illustrations": len(ids), "descriptors": total, "params": params(match_params)})
    )
    os.replace(pointer, folder / "current.json")
    for old in folder.glob("index-*"):  # earlier indexes: a serving node holds what it loaded in memory
        if digest not in old.name:
            old.unlink(missing_ok=True)
    return BlockIndex(ids, keys, index, digest)


def write_rows(path: Path, rows: Iterable[np.ndarray], total: int) -> np.ndarray:
    """``total`` descriptors, illustration after illustration, into the ``.npy`` file ``path`` (written whole, then
    renamed), memory-mapped back: never all of them in memory at once."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "|u1", "fortran_order": False, "shape": (total, 32)})
        for one in rows:
            f.write(np.ascontiguousarray(one, np.uint8).tobytes())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return np.load(path, mmap_mode="r", allow_pickle=False)


async def sync_blocks(
    data_dir: Path,
    catalog: Any,
    store: Any,
    *,
    full: bool = False,
    workers: int | None = None,
    match_params: MatchParams = DEFAULT,
) -> tuple[BlockIndex, BlockIndexSummary]:
    """Bring the feature index up to date with the catalog's live illustrations (``full``: extract everything
    again), its descriptors of ``match_params.patch``; features are extracted in ``workers`` processes (default:
    one per core)."""
    describer = _describer(match_params.patch)
    started, cpu0 = time.perf_counter(), time.process_time()
    rows = catalog.query_all(
        "SELECT i.id, i.content_sha256 FROM illustrations i JOIN books b ON b.id = i.book_id"
        " WHERE i.removed = 0 AND b.withdrawn = 0 ORDER BY i.book_id, i.page_number, i.idx"
    )
    wanted = [(r["id"], _key(r["id"], r["content_sha256"] or "")) for r in rows]
    folder = _folder(data_dir)
    shards = folder / "features"
    if full and shards.exists():
        for path in shards.glob("*.npz"):
            path.unlink()
    # never the data dir itself: a data dir removed under a writer (a replaced snapshot's) stays removed
    folder.mkdir(exist_ok=True)
    shards.mkdir(exist_ok=True)
    stale: list[Path] = []
    where = await asyncio.to_thread(_read_shards, shards, {k for _, k in wanted}, describer, stale)
    todo = [(iid, k) for iid, k in wanted if k not in where]
    todo = list({k: (iid, k) for iid, k in todo}.values())  # one extraction per distinct content
    failed: set[str] = set()
    child_cpu = 0.0
    if todo:
        tiers = catalog.renditions(iid for iid, _ in todo)
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(workers or os.cpu_count() or 1, mp_context=ctx) as pool:
            loop = asyncio.get_running_loop()
            for start in range(0, len(todo), BATCH):
                batch = todo[start : start + BATCH]
                datas = await asyncio.gather(*(_read(store, tiers.get(iid, {})) for iid, _ in batch))
                patch = match_params.patch
                jobs = [loop.run_in_executor(pool, _extract_bytes, d, patch) if d else None for d in datas]
                keys, feats = [], []
                for (iid, key), job in zip(batch, jobs, strict=True):
                    try:
                        if job is None:
                            raise OSError("no stored image")
                        feats.append(await job)
                        keys.append(key)
                    except Exception as exc:  # a corrupt image is one failed illustration
                        log.warning("cannot extract features of %s: %s", iid, exc)
                        failed.add(key)
                await asyncio.to_thread(_write_shard, shards, keys, feats, describer)
        child_cpu = _children_cpu()
        where = await asyncio.to_thread(_read_shards, shards, {k for _, k in wanted}, describer)
    live = [(iid, k) for iid, k in wanted if k in where]
    ids, keys = [iid for iid, _ in live], [k for _, k in live]
    digest = hashlib.sha256(("\n".join(f"{i} {k}" for i, k in live) + params(match_params)).encode()).hexdigest()[:20]
    index = None
    if current_digest(data_dir) == digest:
        try:
            index = await asyncio.to_thread(load_blocks, data_dir, match_params)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:  # a file of it lost or damaged: made again
            log.warning("the feature index %s would not load (%s: %s): making it again", digest,
                        type(exc).__name__, exc)  # fmt: skip
    if index is None:
        index = await asyncio.to_thread(_build, folder, ids, keys, where, digest, match_params)
    current = {name for name, _ in where.values()}
    for path in stale:  # an earlier version's features, none of them in the index now current
        if path.name not in current:
            path.unlink(missing_ok=True)
    summary = BlockIndexSummary(
        len(ids),
        len(todo) - len(failed),
        len(ids) - (len(todo) - len(failed)),
        len(failed),
        index.features.descriptors,
        time.perf_counter() - started,
        time.process_time() - cpu0 + child_cpu,
    )
    log.info("%s", summary.line())
    return index, summary


def _children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
