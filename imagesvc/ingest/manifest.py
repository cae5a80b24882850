"""Load an ingest manifest and validate it against its JSON Schema and the rules a schema cannot state.

Every problem is reported at once, each naming the book, the page and the field, so an operator fixes a manifest in
one pass instead of one error per run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from imagesvc.catalog import book_id_for, illustration_id
from imagesvc.errors import InvalidRequest

__all__ = ["Manifest", "ManifestError", "load_manifest", "manifest_schema"]


class ManifestError(InvalidRequest):
    """The manifest cannot be ingested; ``problems`` lists every location and what is wrong there."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        listing = "\n".join(f"  - {p}" for p in problems)
        super().__init__(
            f"{path}: {len(problems)} problem(s) in the manifest:\n{listing}",
            recovery=["Fix the listed fields; the format is documented in README.md and manifest.schema.json."],
            details={"problems": problems},
        )
        self.problems = problems


@dataclass(frozen=True)
class Manifest:
    """A validated manifest: books with ids filled in, and collections resolved to illustration ids."""

    path: Path
    books: list[dict[str, Any]]
    collections: list[dict[str, Any]]

    def image_path(self, relative: str) -> Path:
        return (self.path.parent / relative).resolve()


@cache
def manifest_schema() -> dict[str, Any]:
    text = resources.files("imagesvc.ingest").joinpath("manifest.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


def _where(doc: dict[str, Any], path: list[str | int]) -> str:
    """Turn a JSON path into 'book "slug", page 3, field illustrations[0].bbox.x'."""
    parts: list[str] = []
    rest = list(path)
    if len(rest) >= 2 and rest[0] == "books" and isinstance(rest[1], int):
        book = doc["books"][rest[1]]
        slug = book.get("slug") if isinstance(book, dict) else None
        parts.append(f'book "{slug}"' if slug else f"book #{rest[1] + 1}")
        rest = rest[2:]
        if len(rest) >= 2 and rest[0] == "pages" and isinstance(rest[1], int) and isinstance(book, dict):
            page = book["pages"][rest[1]]
            number = page.get("number") if isinstance(page, dict) else None
            parts.append(f"page {number}" if number is not None else f"page #{rest[1] + 1}")
            rest = rest[2:]
    elif len(rest) >= 2 and rest[0] == "collections" and isinstance(rest[1], int):
        col = doc["collections"][rest[1]]
        slug = col.get("slug") if isinstance(col, dict) else None
        parts.append(f'collection "{slug}"' if slug else f"collection #{rest[1] + 1}")
        rest = rest[2:]
    field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in rest).lstrip(".")
    if field:
        parts.append(f"field {field}")
    return ", ".join(parts) or "top level"


def _items(value: Any) -> list[dict[str, Any]]:
    """The dict entries of a list (what the schema errors already named is skipped, not crashed on)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _semantic_problems(doc: dict[str, Any], base: Path) -> list[str]:
    """The rules a schema cannot state, checked on whatever parts of ``doc`` are well-formed enough to read."""
    problems: list[str] = []
    seen_slugs: set[str] = set()
    illus: set[tuple[Any, Any, int]] = set()
    for book in _items(doc.get("books")):
        slug = book.get("slug")
        if slug in seen_slugs:
            problems.append(f'book "{slug}": the slug is used by an earlier book too')
        if isinstance(slug, str):
            seen_slugs.add(slug)
        numbers: set[Any] = set()
        for page in _items(book.get("pages")):
            n = page.get("number")
            if n in numbers:
                problems.append(f'book "{slug}", page {n}: the page number appears twice')
            if isinstance(n, int):
                numbers.add(n)
            image = page.get("image")
            if isinstance(image, str) and not (base / image).is_file():
                problems.append(f'book "{slug}", page {n}, field image: no file at {base / image}')
            for i, ill in enumerate(_items(page.get("illustrations"))):
                box = ill.get("bbox") if isinstance(ill.get("bbox"), dict) else {}
                if all(_number(box.get(k)) for k in ("x", "y", "width", "height")) and (
                    box["x"] + box["width"] > 1.0001 or box["y"] + box["height"] > 1.0001
                ):
                    problems.append(f'book "{slug}", page {n}, field illustrations[{i}].bbox: extends past the page')
                if image is None:
                    problems.append(f'book "{slug}", page {n}, field illustrations[{i}]: the page has no image')
                illus.add((slug, n, i))
        for chapter in _items(book.get("chapters")):
            if chapter.get("page") not in numbers:
                problems.append(
                    f'book "{slug}", field chapters: chapter "{chapter.get("title")}" starts on a missing page'
                )
    for col in _items(doc.get("collections")):
        refs = [*_items(col.get("items")), *_items([col.get("cover")])]
        for ref in refs:
            if (ref.get("book"), ref.get("page"), ref.get("index")) not in illus:
                problems.append(
                    f'collection "{col.get("slug")}": no illustration {ref.get("index")} '
                    f'on page {ref.get("page")} of "{ref.get("book")}"'
                )
    return problems


def load_manifest(path: Path | str) -> Manifest:
    """Read and validate a manifest; raises ``ManifestError`` listing every problem found."""
    path = Path(path).resolve()
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ManifestError(path, ["the file does not exist"]) from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(path, [f"not valid JSON: {exc}"]) from exc
    validator = jsonschema.Draft202012Validator(manifest_schema())
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    problems = [f"{_where(doc, list(e.absolute_path))}: {e.message}" for e in errors]
    if isinstance(doc, dict):  # every problem in one round: schema and rules alike
        problems += _semantic_problems(doc, path.parent)
    if problems:
        raise ManifestError(path, problems)
    ids: dict[str, str] = {}
    for book in doc["books"]:
        book.setdefault("id", book_id_for(book["slug"]))
        ids[book["slug"]] = book["id"]
    collections = []
    for col in doc.get("collections", []):

        def resolve(ref: dict[str, Any]) -> str:
            return illustration_id(ids[ref["book"]], ref["page"], ref["index"])

        collections.append(
            {
                **col,
                "item_ids": [resolve(r) for r in col["items"]],
                "cover_id": resolve(col["cover"]) if "cover" in col else None,
            }
        )
    return Manifest(path=path, books=doc["books"], collections=collections)
