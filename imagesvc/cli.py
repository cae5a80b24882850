"""The ``imagesvc`` command: serve, ingest, demo, settings (more subcommands join as the service grows)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from imagesvc.catalog.keys import KEY_TIERS
from imagesvc.errors import ImagesvcError
from imagesvc.observability import write_run_summary
from imagesvc.settings import SettingsError, load_settings

__all__ = ["main"]


def _configure_logging(level: str, fmt: str = "text") -> None:
    from imagesvc.logging_setup import configure_logging

    configure_logging(level, fmt)


def cmd_serve(settings: Any, args: argparse.Namespace) -> int:
    from aiohttp import web

    from imagesvc.app import build_app

    host, port = settings.host, settings.port
    print(f"imagesvc serving on http://{host}:{port} (storage: {settings.storage})", file=sys.stderr)
    app = build_app(settings)

    async def announce_drain(app: web.Application) -> None:
        # run_app has closed the listening sockets by now; in-flight requests get shutdown_timeout to finish.
        log = logging.getLogger("imagesvc.serve")
        log.info("stopping: draining in-flight requests for up to %d s", settings.shutdown_timeout)

    app.on_shutdown.append(announce_drain)
    # SIGTERM and SIGINT: stop accepting, drain for shutdown_timeout, then close resources (cleanup_ctx) and exit 0.
    web.run_app(app, host=host, port=port, print=None, access_log=None, shutdown_timeout=settings.shutdown_timeout)
    logging.getLogger("imagesvc.serve").info("stopped")
    return 0


async def _ingest(settings: Any, manifest_path: Path, progress: bool) -> dict[str, Any]:
    from imagesvc.catalog import Catalog
    from imagesvc.ingest.manifest import load_manifest
    from imagesvc.ingest.pipeline import ingest
    from imagesvc.storage import make_store

    manifest = load_manifest(manifest_path)
    store = make_store(settings)
    catalog = Catalog(settings.data_dir / "catalog.sqlite3")
    pool = ProcessPoolExecutor(max_workers=settings.workers, mp_context=multiprocessing.get_context("spawn"))
    try:
        ensure = getattr(store, "ensure_bucket", None)
        if ensure is not None:
            await ensure()
        summary = await ingest(manifest, settings=settings, catalog=catalog, store=store, pool=pool, progress=progress)
        await _publish(settings, store)
    finally:
        pool.shutdown()
        catalog.close()
        await store.close()
    write_run_summary(settings.data_dir, "ingest", summary.as_dict())  # read by /metrics of serving processes
    return summary.as_dict() | {"line": summary.line()}


async def _publish(settings: Any, store: Any) -> None:
    """Publish a catalog snapshot when IMAGESVC_SNAPSHOT_PREFIX is set (docs/operations.md)."""
    from imagesvc.snapshots import publish_if_configured

    version = await publish_if_configured(settings, store)
    if version:
        print(f"snapshot: published {settings.snapshot_prefix.strip('/')}/{version}", file=sys.stderr)


def cmd_snapshot(settings: Any, args: argparse.Namespace) -> int:
    """Publish a catalog snapshot now (after `keys create` or `keys revoke` on the publishing host)."""
    from imagesvc.storage import make_store

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


def cmd_ingest(settings: Any, args: argparse.Namespace) -> int:
    result = asyncio.run(_ingest(settings, Path(args.manifest), progress=not args.quiet))
    _print_ingest(result, args.json)
    return 0


def _print_ingest(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(result, indent=2))
        return
    for refusal in result["refused"]:
        print(f"refused: book {refusal['book']} page {refusal['page']}: {refusal['error']}", file=sys.stderr)
    print(f"ingest: {result['line']}")


def cmd_demo(settings: Any, args: argparse.Namespace) -> int:
    """Generate the demo library (deterministic, generated pictures) and ingest it."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fixtures"))
    from generate import generate  # type: ignore[import-not-found]

    out = settings.data_dir / "demo-source"
    print(f"demo: generating the demo library in {out}", file=sys.stderr)
    manifest = generate(out)
    result = asyncio.run(_ingest(settings, manifest, progress=not args.quiet))
    _print_ingest(result, args.json)
    return 0


def cmd_index(settings: Any, args: argparse.Namespace) -> int:
    """Embed new and changed illustrations with CLIP and publish the vector index (docs/search.md)."""
    from imagesvc.catalog import Catalog
    from imagesvc.search.clip import Encoder, clip_spec
    from imagesvc.search.index import run_index
    from imagesvc.storage import make_store

    async def go() -> dict[str, Any]:
        spec = clip_spec(settings)
        store, catalog = make_store(settings), Catalog(settings.data_dir / "catalog.sqlite3")
        try:
            encoder = Encoder(spec) if spec.enabled else None
            summary = await run_index(settings, catalog, store, encoder, progress=not args.quiet, full=args.full)
            await _publish(settings, store)
        finally:
            catalog.close()
            await store.close()
        return summary.as_dict() | {"line": summary.line()}

    result = asyncio.run(go())
    write_run_summary(settings.data_dir, "index", result)  # read by /metrics of serving processes
    print(json.dumps(result, indent=2) if args.json else result["line"])
    return 0


async def _rebake(settings: Any, books: list[str]) -> str:
    from imagesvc.catalog import Catalog
    from imagesvc.ingest.rebake import rebake_marks
    from imagesvc.storage import make_store

    store = make_store(settings)
    catalog = Catalog(settings.data_dir / "catalog.sqlite3")
    pool = ProcessPoolExecutor(max_workers=settings.workers, mp_context=multiprocessing.get_context("spawn"))
    try:
        summary = await rebake_marks(settings=settings, catalog=catalog, store=store, pool=pool, books=books or None)
    finally:
        pool.shutdown()
        catalog.close()
        await store.close()
    return summary.line()


def cmd_marks(settings: Any, args: argparse.Namespace) -> int:
    """Redraw visible marks from the clean copies (after the site name or URL changed)."""
    print(f"marks rebake: {asyncio.run(_rebake(settings, args.book))}")
    return 0


def cmd_settings(settings: Any, args: argparse.Namespace) -> int:
    values = settings.public_dict()
    if args.json:
        print(json.dumps(values, indent=2))
    else:
        for name, value in values.items():
            print(f"{name}={value}")
    return 0


def cmd_keys(settings: Any, args: argparse.Namespace) -> int:
    """Issue, list and revoke API keys (stored as hashes in the catalog)."""
    from imagesvc.catalog import Catalog
    from imagesvc.catalog.keys import create_key, list_keys, revoke_key

    catalog = Catalog(settings.data_dir / "catalog.sqlite3")
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="imagesvc", description="Image and gallery service of a digital library.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="run the HTTP service").set_defaults(func=cmd_serve)
    p = sub.add_parser("ingest", help="ingest the books and collections of a manifest")
    p.add_argument("manifest", help="path to a manifest JSON file (format: README.md)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_ingest)
    p = sub.add_parser("demo", help="generate the demo library and ingest it")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser("index", help="embed illustrations with CLIP (only new or changed ones) for gallery search")
    p.add_argument("--full", action="store_true", help="re-embed every illustration")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_index)
    keys = sub.add_parser("keys", help="issue, list and revoke API keys")
    keys.set_defaults(func=cmd_keys)
    ksub = keys.add_subparsers(dest="keys_command", required=True)
    p = ksub.add_parser("create", help="issue a key (printed once)")
    p.add_argument("--tier", required=True, choices=KEY_TIERS)
    p.add_argument("--label", default="", help="who the key is for")
    p.add_argument("--expires-days", type=int, default=0, help="expire after this many days (0: never)")
    p.add_argument("--json", action="store_true")
    p = ksub.add_parser("list", help="list keys (never their secrets)")
    p.add_argument("--json", action="store_true")
    p = ksub.add_parser("revoke", help="revoke a key by its id")
    p.add_argument("id", help="the key's public id (8 hex digits)")
    marks = sub.add_parser("marks", help="manage the visible marks of public tiers")
    msub = marks.add_subparsers(dest="marks_command", required=True)
    p = msub.add_parser("rebake", help="redraw marks from clean copies with the current settings")
    p.add_argument("--book", action="append", default=[], help="a book id or slug (repeatable; default: all)")
    p.set_defaults(func=cmd_marks)
    p = sub.add_parser("settings", help="print the effective settings (secrets masked)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_settings)
    p = sub.add_parser("snapshot", help="publish a catalog snapshot to IMAGESVC_SNAPSHOT_PREFIX now")
    p.set_defaults(func=cmd_snapshot)
    return parser


def _is_tool_command(parser: argparse.ArgumentParser, argv: Sequence[str]) -> bool:
    """``imagesvc tools`` and ``imagesvc <tool> ...`` go to the tool client; its --url/--key/--json may come first."""
    commands = next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    words = iter(argv)
    for word in words:
        if word in ("--url", "--key"):
            next(words, None)  # the option's value
        elif not word.startswith("-"):
            return word not in commands
    return False


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if _is_tool_command(parser, argv):
        from imagesvc.client import main as tool_client

        return tool_client(argv)
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"imagesvc: {exc}", file=sys.stderr)
        return 2
    _configure_logging(settings.log_level, settings.log_format)
    try:
        return int(args.func(settings, args))
    except ImagesvcError as exc:
        print(f"imagesvc: {exc.code}: {exc.message}", file=sys.stderr)
        for hint in exc.recovery:
            print(f"  hint: {hint}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
