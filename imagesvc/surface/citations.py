"""Attribution of served text: the spec's citation formats for a page, and invisible colophons for key holders."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from colophon import Note, encode

__all__ = ["NO_DATE", "Sealer", "attribution", "bibliography", "citation", "doi_url", "page_label"]

NO_DATE = "n.d."
_TERMINAL = (".", "?", "!")


def doi_url(doi: str | None) -> str | None:
    """The resolver URL of a DOI, or None for a book with no DOI."""
    return f"https://doi.org/{doi}" if doi else None


def attribution(book: dict[str, Any]) -> dict[str, Any]:
    """What anyone reusing a book's text or images must carry: the digitizing institution and links to it and to
    the item, the licence, and the edition's DOI (None when unpublished). Every tool that serves a book's content
    returns this same object."""
    return {
        "institution": book["institution"],
        "institution_url": book["institution_url"],
        "item_url": book["item_url"],
        "license": book["license"],
        "doi": book["doi"],
        "doi_url": doi_url(book["doi"]),
    }


def page_label(number: int) -> str:
    """How a citation names one page: ``p. 5``."""
    return f"p. {number}"


def _year(book: dict[str, Any]) -> str:
    year = book.get("year")
    return NO_DATE if year is None else str(year)


def _clean(value: Any) -> str | None:
    """A field as display text, or None when absent or blank (so a citation never reads 'None' or ', ,')."""
    if value is None:
        return None
    text = " ".join(str(value).split())
    return text or None


def _sentence(text: str) -> str:
    """``text`` closed with one full stop: a title ending in '?' or an initial ending in '.' gets no second one."""
    return text if text.endswith(_TERMINAL) else text + "."


def bibliography(book: dict[str, Any]) -> str:
    """The bibliography entry of a book: ``<Author>. <Title>. Translated by <translator>. <Year>. DOI: <DOI>``."""
    translator = _clean(book.get("translator"))
    doi = _clean(book.get("doi"))
    entry = (
        f"{_sentence(_clean(book.get('author')) or 'Anonymous')} {_sentence(_clean(book.get('title')) or 'Untitled')}"
    )
    if translator:
        entry += f" {_sentence('Translated by ' + translator)}"
    entry += f" {_sentence(_year(book))}"
    return f"{entry} DOI: {doi}" if doi else entry


def citation(book: dict[str, Any], number: int, url: str) -> dict[str, str | None]:
    """The citation block of page ``number`` of ``book``: ``{inline, footnote, bibliography, citation_url, doi_url}``.

    Shapes (service spec §2): inline ``(<Author> <Year>, p. <N>)``; footnote ``<Author>, <Title>, trans.
    <translator> (<Year>), p. <N>. DOI: <DOI>``; bibliography ``<Author>. <Title>. Translated by <translator>.
    <Year>. DOI: <DOI>``. A book with no year reads ``n.d.``; the translator and DOI parts are left out when absent.
    """
    author = _clean(book.get("author")) or "Anonymous"
    title = _clean(book.get("title")) or "Untitled"
    translator = _clean(book.get("translator"))
    doi = _clean(book.get("doi"))
    year = _year(book)
    page = page_label(number)

    footnote = f"{author}, {title}"
    if translator:
        footnote += f", trans. {translator}"
    footnote += f" ({year}), {page}."
    if doi:
        footnote += f" DOI: {doi}"
    return {
        "inline": f"({author} {year}, {page})",
        "footnote": footnote,
        "bibliography": bibliography(book),
        "citation_url": url,
        "doi_url": doi_url(doi),
    }


@dataclass(frozen=True)
class Sealer:
    """Seals text served to one caller: with an API key each text gets a colophon naming the edition, the page URL
    and the key's public reference; for anyone else (``key_ref`` None) text is returned exactly as stored."""

    book: dict[str, Any]
    key_ref: str | None
    secret: bytes
    date: dt.date

    @classmethod
    def for_call(cls, book: dict[str, Any], key_ref: str | None, secret: bytes) -> Sealer:
        return cls(book, key_ref, secret, dt.datetime.now(dt.UTC).date())

    @property
    def active(self) -> bool:
        return self.key_ref is not None

    def seal(self, text: str | None, url: str) -> str | None:
        """``text`` with a colophon whose note points at ``url`` (the page's citation URL); None stays None."""
        if text is None or self.key_ref is None:
            return text
        return encode(text, self._note(url), self.secret)

    def _note(self, url: str) -> Note:
        # Note refuses over-long URLs and DOIs and odd years; a key's text must still carry provenance, so fall back
        # to shorter values (no DOI, the book's URL, the site's origin) rather than serve it unmarked or fail.
        book = self.book
        year = book.get("year")
        year = year if isinstance(year, int) and -9999 <= year <= 9999 else None
        parts = urlsplit(url)
        urls = (url, url.split("?", 1)[0], f"{parts.scheme}://{parts.netloc}/")
        tries = [(u, doi) for u in urls for doi in (book.get("doi"), None)]
        for candidate, doi in tries[:-1]:
            try:
                return Note(
                    title=book["title"], year=year, doi=doi, url=candidate, key_ref=self.key_ref or "", date=self.date
                )
            except ValueError:
                continue
        # The origin alone always fits; a key_ref the Note rejects is a bug in key issuance, not something to hide.
        candidate, doi = tries[-1]
        return Note(title=book["title"], year=year, doi=doi, url=candidate, key_ref=self.key_ref or "", date=self.date)
