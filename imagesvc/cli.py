"""The ``imagesvc`` command line: settings, logging, the subcommand table, ``serve``, and the tool client door."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from imagesvc.catalog.keys import KEY_TIERS
from imagesvc.commands import cmd_demo, cmd_doctor, cmd_index, cmd_ingest, cmd_keys, cmd_marks, cmd_snapshot
from imagesvc.errors import ImagesvcError
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

    warming: set[asyncio.Task[None]] = set()

    async def warm_search(app: web.Application) -> None:
        # The text model and the search indexes load in the background, so the first searches need not wait.
        from imagesvc.search.by_image import warm_up
        from imagesvc.web.keys import SERVICES

        task = asyncio.ensure_future(warm_up(app[SERVICES]))
        warming.add(task)
        task.add_done_callback(warming.discard)

    app.on_startup.append(warm_search)
    app.on_shutdown.append(announce_drain)
    # SIGTERM and SIGINT: stop accepting, drain for shutdown_timeout, then close resources (cleanup_ctx) and exit 0.
    web.run_app(app, host=host, port=port, print=None, access_log=None, shutdown_timeout=settings.shutdown_timeout)
    logging.getLogger("imagesvc.serve").info("stopped")
    return 0


def cmd_settings(settings: Any, args: argparse.Namespace) -> int:
    values = settings.public_dict()
    if args.json:
        print(json.dumps(values, indent=2))
    else:
        for name, value in values.items():
            print(f"{name}={value}")
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
    p = sub.add_parser(
        "index",
        help="embed illustrations (text model; CLIP when configured) and hash them for search by image",
    )
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
    p = sub.add_parser("doctor", help="check settings, store, catalog, access backend, CLIP weights and secrets")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_doctor)
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

        try:
            return tool_client(argv)
        except BrokenPipeError:  # the reader went away (`imagesvc ... | head`): not an error worth a traceback
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
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
