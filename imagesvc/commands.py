"""Operator jobs behind ``imagesvc``: ingest, demo, index, marks rebake, snapshot, API keys, and withdrawals.

Each ``cmd_*`` takes the settings and the parsed arguments and returns an exit code; ``imagesvc.cli`` wires them
into the command line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from imagesvc.settings import Settings

# Exit status of ingest and demo when they finished but some pages were refused (documented in README and --help).
EXIT_REFUSED = 3

__all__ = [
    "EXIT_REFUSED",
    "cmd_books",
    "cmd_demo",
    "cmd_doctor",
    "cmd_index",
    "cmd_ingest",
    "cmd_keys",
    "cmd_marks",
    "cmd_models",
    "cmd_snapshot",
]


async def _ingest(settings: Settings, manifest_paths: list[Path], progress: bool) -> dict[str, Any]:
    from imagesvc.catalog.backends import open_catalog
    from imagesvc.ingest.library import check_library, manifests
    from imagesvc.ingest.pipeline import IngestSummary, ingest
    from imagesvc.ingest.workers import make_pool
    from imagesvc.storage import CreatesBucket, LocalFiles, make_store

    check_library(manifest_paths)  # every problem of every manifest before any book is touched
    summary = IngestSummary()
    store = make_store(settings)
    catalog = open_catalog(settings)
    pool = make_pool(settings.workers)
    try:
        if isinstance(store, CreatesBucket):
            await store.ensure_bucket()
        if isinstance(store, LocalFiles):  # a local store may hold temp files from an ingest that was killed mid-write
            await store.sweep_temp()
        for manifest in manifests(manifest_paths):  # one manifest in memory at a time
            done = await ingest(manifest, settings=settings, catalog=catalog, store=store, pool=pool, progress=progress)
            summary.add(done)
            del manifest, done
        await _publish(settings, store)
    finally:
        pool.shutdown()
        catalog.close()
        await store.close()
    from imagesvc.observability import write_run_summary  # here: `serve` must import prometheus-client after it
    # has set PROMETHEUS_MULTIPROC_DIR (imagesvc/serving.py)

    write_run_summary(settings.data_dir, "ingest", summary.as_dict())  # read by /metrics of serving processes
    return summary.as_dict() | {"line": summary.line()}


async def _publish(settings: Settings, store: Any) -> None:
    """Publish a catalog snapshot when IMAGESVC_SNAPSHOT_PREFIX is set (docs/operations.md)."""
    from imagesvc.catalog.snapshots import publish_if_configured

    version = await publish_if_configured(settings, store)
    if version:
        print(f"snapshot: published {settings.snapshot_prefix.strip('/')}/{version}", file=sys.stderr)


def cmd_snapshot(settings: Settings, args: argparse.Namespace) -> int:
    """Publish a catalog snapshot now (after `keys create` or `keys revoke` on the publishing host)."""
    from imagesvc.storage import make_store

    if settings.catalog == "postgres":
        print("imagesvc: nothing to publish: with IMAGESVC_CATALOG=postgres every node reads the one database")
        return 0
    if not settings.snapshot_prefix:
        print("imagesvc: set IMAGESVC_SNAPSHOT_PREFIX to say where snapshots live", file=sys.stderr)
        return 2

    async def go() -> None:
        store = make_store(settings)
        try:
            await _publish(settings, store)
        finally:
            await store.close()

    asyncio.run(go())
    return 0


def cmd_ingest(settings: Settings, args: argparse.Namespace) -> int:
    from imagesvc.ingest.library import manifest_paths

    result = asyncio.run(_ingest(settings, manifest_paths(args.manifest), progress=not args.quiet))
    _print_ingest(result, args.json)
    return EXIT_REFUSED if result["refused"] else 0


def _print_ingest(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(result, indent=2))
        return
    for refusal in result["refused"]:
        print(
            f"refused ({refusal['reason']}): book {refusal['book']} page {refusal['page']}: {refusal['error']}",
            file=sys.stderr,
        )
    print(f"ingest: {result['line']}")


def cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    """Generate the demo library (deterministic, generated pictures) and ingest it."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fixtures"))
    from generate import generate  # type: ignore[import-not-found]

    out = settings.data_dir / "demo-source"
    print(f"demo: generating the demo library in {out}", file=sys.stderr)
    manifest = generate(out)
    result = asyncio.run(_ingest(settings, [manifest], progress=not args.quiet))
    _print_ingest(result, args.json)
    from imagesvc.catalog.run_lock import RunLocked

    try:
        lines = asyncio.run(_demo_indexes(settings))  # the first text search and search by image work at once
    except RunLocked as exc:
        print(f"demo: the indexes were not made: {exc}; run `imagesvc index` when it ends", file=sys.stderr)
        return EXIT_REFUSED
    for line in lines:
        print(f"demo: {line}", file=sys.stderr)
    return EXIT_REFUSED if result["refused"] else 0


async def _demo_indexes(settings: Settings) -> list[str]:
    """The text index and search by image's block index of the demo library, made and published as `imagesvc index`
    makes and publishes them (docs/search.md), holding the index lock as `imagesvc index` does."""
    from imagesvc.catalog.backends import open_catalog
    from imagesvc.catalog.run_lock import exclusive_run
    from imagesvc.search.block_index import params, sync_blocks
    from imagesvc.search.dense import run_text_index
    from imagesvc.search.e5_model import models_root
    from imagesvc.search.text_models import shared_model
    from imagesvc.search.text_seed import DEMO_SEED, seed_text_index
    from imagesvc.storage import make_store

    store, catalog = make_store(settings), open_catalog(settings)
    lines: list[str] = []
    try:
        with exclusive_run(catalog, "index"):
            if settings.text_model != "off":
                # the demo's passages as embedded once by this model (fixtures/): only what changed since is embedded,
                # by the model run_text_index asks for
                models = models_root(settings.model_dir)
                model = shared_model(settings.text_model, os.cpu_count() or 1, bulk=True, models=models)
                if seed_text_index(settings.data_dir, model.key):
                    lines.append(f"text index seeded from {DEMO_SEED.name}")
            text = await run_text_index(settings, catalog)
            if text is not None:
                lines.append(text.line())
            blocks = (await sync_blocks(settings.data_dir, catalog, store))[1]
            lines.append(blocks.line())
            made = {"blocks": (params(), blocks.illustrations)}
            if text is not None:
                made["text"] = (text.model, text.vectors)
            lines += await _publish_indexes(settings, catalog, store, made)
    finally:
        catalog.close()
        await store.close()
    return lines


async def _publish_indexes(settings: Settings, catalog: Any, store: Any, made: dict[str, tuple[str, int]]) -> list[str]:
    """Publish each index in ``made`` (kind -> model, illustrations) from the data dir to the object store and name
    it in the catalog, where serving nodes follow it (imagesvc/search/published.py)."""
    from imagesvc.search.published import publish

    lines = []
    for kind, (model, illustrations) in made.items():
        done = await publish(catalog, store, kind, settings.data_dir, model=model, illustrations=illustrations)
        if done is not None:
            lines.append(done.line())
    return lines


async def _seed(settings: Settings, catalog: Any, store: Any, kinds: list[str]) -> None:
    """A data dir without the indexes starts from the published ones: `imagesvc index` on a fresh machine (a
    one-shot container) embeds only what changed since."""
    from imagesvc.search.published import FETCH_ERRORS, seed_local

    for kind in kinds:
        try:
            await seed_local(catalog, store, kind, settings.data_dir)
        except FETCH_ERRORS as exc:
            print(f"imagesvc: the published {kind} index cannot be read, making it anew: {exc}", file=sys.stderr)


def cmd_models(settings: Settings, args: argparse.Namespace) -> int:
    """Build e5's int8 graph and tokenizer into the models folder (``IMAGESVC_MODEL_DIR``), once per install: serving
    workers and `imagesvc index` only open it (docs/search.md). Nothing is done when it is there, unless ``--force``."""
    from imagesvc.search.e5_build import BuildError, build
    from imagesvc.search.e5_model import models_root

    try:
        folder = build(models_root(settings.model_dir), force=args.force)
    except (BuildError, OSError) as exc:
        print(f"models: e5's graph was not built: {exc}", file=sys.stderr)
        return 1
    print(f"models: e5's int8 graph in {folder}", file=sys.stderr)
    return 0


def cmd_index(settings: Settings, args: argparse.Namespace) -> int:
    """Embed new and changed illustrations (text model; CLIP when weights are configured), extract their local
    features for search by image (on every core, resumable), and publish the indexes (docs/search.md). One run at a
    time per catalog: a second is refused while the first holds the index lock."""
    from imagesvc.catalog.backends import open_catalog
    from imagesvc.catalog.run_lock import RunLocked, exclusive_run
    from imagesvc.storage import make_store

    async def go() -> dict[str, Any]:
        store, catalog = make_store(settings), open_catalog(settings)
        try:
            with exclusive_run(catalog, "index"):
                return await _index_locked(settings, args, catalog, store)
        finally:
            catalog.close()
            await store.close()

    try:
        result = asyncio.run(go())
    except RunLocked as exc:
        print(f"imagesvc index: refused: {exc}; run it again when that one ends", file=sys.stderr)
        return EXIT_REFUSED
    from imagesvc.observability import write_run_summary

    write_run_summary(settings.data_dir, "index", result)  # read by /metrics of serving processes
    print(json.dumps(result, indent=2) if args.json else result["line"])
    return 0


async def _index_locked(settings: Settings, args: argparse.Namespace, catalog: Any, store: Any) -> dict[str, Any]:
    """``imagesvc index``'s work, done while it holds the index lock."""
    from imagesvc.search.block_index import params, sync_blocks
    from imagesvc.search.clip import Encoder, clip_spec
    from imagesvc.search.dense import run_text_index
    from imagesvc.search.index import run_index

    spec = clip_spec(settings)
    result: dict[str, Any] = {}
    made: dict[str, tuple[str, int]] = {}
    if not args.full:
        await _seed(settings, catalog, store, ["text", "clip"] if spec.enabled else ["text"])
    text = await run_text_index(settings, catalog, full=args.full)
    if text is not None:
        made["text"] = (text.model, text.vectors)
    lines = [text.line() if text else "text index: off (IMAGESVC_TEXT_MODEL=off)"]
    result["text"] = text.as_dict() if text else None
    blocks = await sync_blocks(settings.data_dir, catalog, store, full=args.full)
    result["blocks"] = blocks[1].as_dict()
    lines.append(blocks[1].line())
    made["blocks"] = (params(), blocks[1].illustrations)
    if spec.enabled:
        summary = await run_index(settings, catalog, store, Encoder(spec), progress=not args.quiet, full=args.full)
        result |= summary.as_dict()
        lines.append(summary.line())
        made["clip"] = (summary.model, summary.vectors)
    else:
        lines.append(f"CLIP: {spec.describe()}")
    published = await _publish_indexes(settings, catalog, store, made)
    result["published"] = published
    lines += published
    await _publish(settings, store)
    return result | {"line": "\n".join(lines)}


async def _rebake(settings: Settings, books: list[str]) -> str:
    from imagesvc.catalog.backends import open_catalog
    from imagesvc.ingest.rebake import rebake_marks
    from imagesvc.ingest.workers import make_pool
    from imagesvc.storage import make_store

    store = make_store(settings)
    catalog = open_catalog(settings)
    pool = make_pool(settings.workers)
    try:
        summary = await rebake_marks(settings=settings, catalog=catalog, store=store, pool=pool, books=books or None)
    finally:
        pool.shutdown()
        catalog.close()
        await store.close()
    return summary.line()


def cmd_marks(settings: Settings, args: argparse.Namespace) -> int:
    """Redraw visible marks from the clean copies (after the site name or URL changed)."""
    print(f"marks rebake: {asyncio.run(_rebake(settings, args.book))}")
    return 0


def cmd_keys(settings: Settings, args: argparse.Namespace) -> int:
    """Issue, list and revoke API keys (stored as hashes in the catalog)."""
    from imagesvc.catalog.api_keys import create_key, list_keys, revoke_key
    from imagesvc.catalog.backends import open_catalog

    catalog = open_catalog(settings)
    try:
        if args.keys_command == "create":
            expires = None
            if args.expires_days:
                expires = datetime.now(UTC) + timedelta(days=args.expires_days)
            key, record = create_key(catalog, args.tier, args.label, expires)
            if args.json:
                print(json.dumps({"key": key, "id": record.id, "tier": record.tier, "expires_at": record.expires_at}))
            else:
                print(key)
                print(f"id {record.id}, tier {record.tier}: shown once, store it now", file=sys.stderr)
        elif args.keys_command == "list":
            rows = [{**vars(k), "state": k.state()} for k in list_keys(catalog)]
            if args.json:
                print(json.dumps(rows, indent=2))
            for row in [] if args.json else rows:
                print(f"{row['id']}  {row['tier']:<10} {row['state']:<8} {row['created_at']}  {row['label']}")
        elif args.keys_command == "revoke":
            if not revoke_key(catalog, args.id):
                print(f"imagesvc: no live key with id {args.id!r}", file=sys.stderr)
                return 1
            print(f"revoked {args.id}")
    finally:
        catalog.close()
    return 0


def cmd_books(settings: Settings, args: argparse.Namespace) -> int:
    """Withdraw a book or restore it, public images included (imagesvc/ingest/withdrawal.py)."""
    from imagesvc.catalog.backends import open_catalog
    from imagesvc.ingest.withdrawal import restore, withdraw
    from imagesvc.storage import make_store

    change = withdraw if args.books_command == "withdraw" else restore

    async def go() -> dict[str, Any] | str:
        store, catalog = make_store(settings), open_catalog(settings)
        try:
            done = await change(catalog, store, args.book, settings.image_base)
            await _publish(settings, store)  # nodes that follow catalog snapshots see the change with the next one
        finally:
            catalog.close()
            await store.close()
        return done.as_dict() if args.json else done.line()

    result = asyncio.run(go())
    print(json.dumps(result, indent=2) if args.json else result)
    return 0


def cmd_doctor(settings: Settings, args: argparse.Namespace) -> int:
    """Check settings and dependencies; exit 1 when any check fails (warnings alone exit 0)."""
    from imagesvc.doctor import run_checks

    findings = asyncio.run(run_checks(settings))
    if args.json:
        print(json.dumps([vars(f) for f in findings], indent=2))
    else:
        for finding in findings:
            print(finding.line())
    return 1 if any(f.level == "fail" for f in findings) else 0
