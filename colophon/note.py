"""The provenance note: a small record and its compact, escaped, printable-ASCII text form."""

from __future__ import annotations

import dataclasses
import datetime
import re
import unicodedata
from typing import Any

__all__ = ["NOTE_PREFIX", "TITLE_BYTES", "Note"]

NOTE_PREFIX = "cite:"
TITLE_BYTES = 24
DOI_BYTES = 64
URL_BYTES = 100
YEAR_RANGE = range(-9999, 10000)
_ELLIPSIS = "..."
_HTTPS = "https://"
_DELIMITERS = frozenset("%|")
_KEY_REF = re.compile(r"[A-Za-z0-9_.-]{1,32}")
_ISO_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_YEAR = re.compile(r"-?[1-9][0-9]{0,3}|0")
_FIELDS = 6


def _escape(value: str) -> str:
    """Percent-escape the delimiters and every byte outside printable ASCII (0x20-0x7E), uppercase hex."""
    out: list[str] = []
    for ch in value:
        if ch in _DELIMITERS or not 0x20 <= ord(ch) <= 0x7E:
            # surrogatepass keeps any Python str encodable, so construction never fails on odd input.
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
        else:
            out.append(ch)
    return "".join(out)


def _unescape(field: str) -> str:
    """Invert `_escape`; raise ValueError unless `field` is exactly what `_escape` would have written."""
    raw = bytearray()
    i = 0
    while i < len(field):
        ch = field[i]
        if ch == "%":
            pair = field[i + 1 : i + 3]
            if len(pair) != 2 or any(c not in "0123456789ABCDEF" for c in pair):
                raise ValueError(f"bad escape at {field[i : i + 3]!r}")
            raw.append(int(pair, 16))
            i += 3
        else:
            raw.extend(ch.encode("ascii"))
            i += 1
    value = bytes(raw).decode("utf-8", "surrogatepass")
    if _escape(value) != field:
        raise ValueError("field is not canonically escaped")
    return value


def _shorten(title: str) -> str:
    """Cut `title` so its escaped form fits TITLE_BYTES, preferring a word break, and mark the cut with '...'."""
    if len(_escape(title)) <= TITLE_BYTES:
        return title
    room = TITLE_BYTES - len(_ELLIPSIS)
    end, used = 0, 0
    for ch in title:
        used += len(_escape(ch))
        if used > room:
            break
        end += 1
    # Never separate a base letter from its combining marks: the kept letter would read as a different one.
    while end > 0 and unicodedata.combining(title[end]):
        end -= 1
    cut = title[:end]
    space = cut.rfind(" ")
    if space >= len(cut) // 2:
        cut = cut[:space]
    return cut.rstrip() + _ELLIPSIS


@dataclasses.dataclass(frozen=True, kw_only=True)
class Note:
    """Who was served which edition, and when.

    `title` is shortened at construction so that its escaped form fits TITLE_BYTES (so `to_text` loses nothing);
    `date` may be given as an ISO string. Raises ValueError for a year outside -9999..9999, an over-long DOI or URL,
    a URL that is not absolute http(s), or a key reference outside [A-Za-z0-9_.-]{1,32} (a reference, never a key).
    """

    title: str
    year: int | None = None
    doi: str | None = None
    url: str
    key_ref: str
    date: datetime.date

    def __post_init__(self) -> None:
        if not isinstance(self.title, str):
            raise TypeError("title must be a str")
        object.__setattr__(self, "title", _shorten(self.title))
        if self.year is not None and (type(self.year) is not int or self.year not in YEAR_RANGE):
            raise ValueError(f"year must be an int in -9999..9999 or None, not {self.year!r}")
        if self.doi is not None and not 0 < len(_escape(self.doi)) <= DOI_BYTES:
            raise ValueError(f"doi must be 1..{DOI_BYTES} bytes once escaped")
        if not isinstance(self.url, str) or not re.match(r"https?://[^/]", self.url):
            raise ValueError(f"url must be an absolute http(s) URL, not {self.url!r}")
        if len(_escape(self._short_url())) > URL_BYTES:
            raise ValueError(f"url must be at most {URL_BYTES} bytes once escaped (without https://)")
        if not isinstance(self.key_ref, str) or not _KEY_REF.fullmatch(self.key_ref):
            raise ValueError(f"key_ref must match [A-Za-z0-9_.-]{{1,32}}, not {self.key_ref!r}")
        date = self.date
        if isinstance(date, str):
            date = datetime.date.fromisoformat(date) if _ISO_DATE.fullmatch(date) else None
        # datetime is a subclass of date; its isoformat would smuggle a time (and time zone doubts) into the note.
        if type(date) is not datetime.date:
            raise ValueError(f"date must be a datetime.date or 'YYYY-MM-DD', not {self.date!r}")
        object.__setattr__(self, "date", date)

    def _short_url(self) -> str:
        # https is the common case; dropping its scheme saves 8 bytes (about 24 LLM tokens) in every served text.
        # A field holding "://" is read back as a whole URL, so elide only where the rest has none.
        rest = self.url[len(_HTTPS) :]
        return rest if self.url.startswith(_HTTPS) and "://" not in rest else self.url

    def to_text(self) -> str:
        """The note as printable ASCII: `cite:<title>|<year>|doi:<doi>|<url>|by:<key_ref>|<date>` (see docs)."""
        fields = [
            NOTE_PREFIX + _escape(self.title),
            "" if self.year is None else str(self.year),
            "" if self.doi is None else "doi:" + _escape(self.doi),
            _escape(self._short_url()),
            "by:" + self.key_ref,
            self.date.isoformat(),
        ]
        return "|".join(fields)

    @classmethod
    def parse(cls, text: str) -> Note:
        """Inverse of `to_text`; raises ValueError unless `text` is exactly what `to_text` writes for some Note."""
        fields = text.split("|")
        if len(fields) != _FIELDS:
            raise ValueError(f"a note has {_FIELDS} '|'-separated fields, found {len(fields)}")
        title, year, doi, url, ref, date = fields
        if not title.startswith(NOTE_PREFIX) or not ref.startswith("by:"):
            raise ValueError("note must start with 'cite:' and name the requester with 'by:'")
        if year and not _YEAR.fullmatch(year):
            raise ValueError(f"bad year {year!r}")
        if doi and not doi.startswith("doi:"):
            raise ValueError("a DOI field must start with 'doi:'")
        short_url = _unescape(url)
        note = cls(
            title=_unescape(title[len(NOTE_PREFIX) :]),
            year=int(year) if year else None,
            doi=_unescape(doi[len("doi:") :]) if doi else None,
            url=short_url if "://" in short_url else _HTTPS + short_url,
            key_ref=ref[len("by:") :],
            date=date,
        )
        # Canonical form only: whatever parses must re-serialize to the same bytes (one note, one spelling).
        if note.to_text() != text:
            raise ValueError("note text is not in canonical form")
        return note

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields, with the date as an ISO string."""
        return {
            "title": self.title,
            "year": self.year,
            "doi": self.doi,
            "url": self.url,
            "key_ref": self.key_ref,
            "date": self.date.isoformat(),
        }
