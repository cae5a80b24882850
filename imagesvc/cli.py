"""The ``imagesvc`` command line: settings, logging, the subcommand table, ``serve``, and the tool client door."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from imagesvc.access.policy import KEY_TIERS, key_tier
from imagesvc.commands import (
    cmd_books,
    cmd_demo,
    cmd_doctor,
    cmd_index,
    cmd_ingest,
    cmd_keys,
    cmd_marks,
    cmd_models,
    cmd_snapshot,
)
from imagesvc.errors import ImagesvcError
from imagesvc.settings import Settings, SettingsError, load_settings

__all__ = ["main"]


def _key_tier(name: str) -> str:
    """``--tier``: refused with the same message ``create_key`` gives (``access.policy.key_tier``)."""
    try:
        return key_tier(name)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _configure_logging(level: str, fmt: str = "text") -> None:
    from imagesvc.logging_setup import configure_logging

    configure_logging(level, fmt)


def _positive(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected 1 or more, got {value}")
    return value


def cmd_serve(settings: Settings, args: argparse.Namespace) -> int:
    from imagesvc.serving import serve

    workers = args.workers or settings.serve_workers or os.cpu_count() or 1
    return serve(settings, workers)


def cmd_settings(settings: Settings, args: argparse.Namespace) -> int:
    values = settings.public_dict()
    if args.json:
        print(json.dumps(values, indent=2))
    else:
        for name, value in values.items():
            print(f"{name}={value}")
    return 0


def build_parser() -> tuple[argparse.ArgumentParser, frozenset[str]]:
    """The parser of the local subcommands, and their names (any other first word is a tool: ``_is_tool_command``)."""
    parser = argparse.ArgumentParser(prog="imagesvc", description="Image and gallery service of a digital library.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="run the HTTP service")
    p.add_argument(
        "--workers",
        type=_positive,
        default=0,
        help="processes serving one port (default: IMAGESVC_SERVE_WORKERS, else one per CPU core)",
    )
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser(
        "ingest",
        help="ingest the books and collections of one or more manifests",
        description="Ingest the books and collections of manifests (idempotent and resumable). A library may be "
        "given as many manifests, or folders of them: all are checked first, then ingested one at a time, so memory "
        "is bounded by the largest manifest.",
        epilog="exit status: 0 every page went in; 3 finished, but some pages were refused (each is listed on stderr "
        "with its file and reason, and is image_unavailable); 1 the manifest or the store failed, nothing changed "
        "for the books not reached; 2 bad settings.",
    )
    p.add_argument(
        "manifest", nargs="+", help="manifest JSON files or folders of them (*.json, recursively; format: README.md)"
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_ingest)
    p = sub.add_parser("demo", help="generate the demo library and ingest it")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser("models", help="build the text models' graphs once, for workers to open (docs/search.md)")
    p.add_argument("--force", action="store_true", help="build again even when they are there")
    p.set_defaults(func=cmd_models)
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
    p.add_argument("--tier", required=True, type=_key_tier, metavar="{" + ",".join(KEY_TIERS) + "}")
    p.add_argument("--label", default="", help="who the key is for")
    p.add_argument("--expires-days", type=int, default=0, help="expire after this many days (0: never)")
    p.add_argument("--json", action="store_true")
    p = ksub.add_parser("list", help="list keys (never their secrets)")
    p.add_argument("--json", action="store_true")
    p = ksub.add_parser("revoke", help="revoke a key by its id")
    p.add_argument("id", help="the key's public id (8 hex digits)")
    books = sub.add_parser("books", help="withdraw a book (its public images too) or restore it")
    books.set_defaults(func=cmd_books)
    bsub = books.add_subparsers(dest="books_command", required=True)
    for name, text in (
        ("withdraw", "take a book down: hidden everywhere, its public images moved out of pub/"),
        ("restore", "put a withdrawn book back: its public images at the same URLs, shown everywhere again"),
    ):
        p = bsub.add_parser(name, help=text, description=text + " (docs/operations.md).")
        p.add_argument("book", help="the book's id or slug")
        p.add_argument("--json", action="store_true", help="print the result as JSON (with the public URLs)")
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
    from imagesvc.download import add_parser as add_download
    from imagesvc.download import run as run_download

    add_download(sub)
    sub.choices["download"].set_defaults(func=lambda settings, args: run_download(args))
    return parser, frozenset(sub.choices)


def _is_tool_command(commands: frozenset[str], argv: Sequence[str]) -> bool:
    """``imagesvc tools`` and ``imagesvc <tool> ...`` (any first word not in ``commands``) go to the tool client; its
    --url/--key/--json may come first."""
    words = iter(argv)
    for word in words:
        if word in ("--url", "--key"):
            next(words, None)  # the option's value
        elif not word.startswith("-"):
            return word not in commands
    return False


def main(argv: Sequence[str] | None = None) -> int:
    parser, commands = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if _is_tool_command(commands, argv):
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
        if getattr(args, "json", False):  # scripts read stdout: the one JSON error shape
            print(json.dumps(exc.to_dict(), indent=2, ensure_ascii=False))
        print(f"imagesvc: {exc.code}: {exc.message}", file=sys.stderr)
        for hint in exc.recovery:
            print(f"  hint: {hint}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
