"""A small reader of served HTML for the page tests: elements with their attributes and text, as a person's
browser would find them (no regular expressions over markup)."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

__all__ = ["Element", "parse"]

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    parts: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return " ".join("".join(self.parts).split())

    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []
        self.open: list[Element] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs})
        self.elements.append(element)
        if tag not in VOID:
            self.open.append(element)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.open) - 1, -1, -1):
            if self.open[i].tag == tag:
                del self.open[i:]
                return

    def handle_data(self, data: str) -> None:
        for element in self.open:
            element.parts.append(data)


class Document:
    def __init__(self, html: str) -> None:
        reader = _Reader()
        reader.feed(html)
        self.elements = reader.elements

    def all(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[Element]:
        return [
            e
            for e in self.elements
            if (tag is None or e.tag == tag)
            and (cls is None or cls in e.classes())
            and all(e.attrs.get(k.rstrip("_")) == v for k, v in attrs.items())
        ]

    def one(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> Element:
        found = self.all(tag, cls, **attrs)
        assert len(found) == 1, f"expected one {tag or ''}.{cls or ''} {attrs}, found {len(found)}"
        return found[0]

    def by_id(self, id_: str) -> Element:
        return self.one(id=id_)


def parse(html: str) -> Document:
    return Document(html)
