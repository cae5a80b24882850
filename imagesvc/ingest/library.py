"""A library given as many manifests: files, or folders of them (e.g. one manifest per book), ingested one at a time.

A single manifest is read whole (JSON Schema validation needs the document), so memory grows with its size (83.7 MB
of manifest held 193 MB resident). Split into many, the library is checked first, one manifest at a time, with every
problem of every manifest reported at once (and a slug given in two manifests is a problem), then ingested one
manifest at a time: memory is bounded by the largest manifest, not by the library.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from imagesvc.ingest.manifest import Manifest, ManifestError, load_manifest

__all__ = ["LibraryError", "check_library", "manifest_paths", "manifests"]


class LibraryError(ManifestError):
    """Problems in one or more of a library's manifests, each problem prefixed by its file."""


def manifest_paths(arguments: Iterable[str | Path]) -> list[Path]:
    """Every manifest file named: a file as given, a folder as its ``*.json`` files (recursively, in name order)."""
    out: list[Path] = []
    for argument in arguments:
        path = Path(argument)
        out += sorted(path.rglob("*.json")) if path.is_dir() else [path]
    return out


def check_library(paths: list[Path]) -> None:
    """Validate every manifest (one in memory at a time); raises ``LibraryError`` listing every problem in all."""
    problems: list[str] = []
    first_seen: dict[str, Path] = {}
    if not paths:
        raise LibraryError(Path("."), ["no manifest given (a folder holds no *.json file)"])
    for path in paths:
        try:
            manifest = load_manifest(path)
        except ManifestError as exc:
            problems += [f"{path}: {p}" for p in exc.problems]
            continue
        for book in manifest.books:
            earlier = first_seen.setdefault(book["slug"], path)
            if earlier != path:
                problems.append(f'{path}: book "{book["slug"]}": the slug is also in {earlier}')
        del manifest
    if problems:
        raise LibraryError(paths[0] if len(paths) == 1 else paths[0].parent, problems)


def manifests(paths: list[Path]) -> Iterator[Manifest]:
    """The manifests, loaded one at a time (the previous one is released before the next is read)."""
    for path in paths:
        yield load_manifest(path)
