"""What a bag folder already holds: the journal of files written (``.imagesvc-download/journal.jsonl``) and the
bag's point in the change feed (``.imagesvc-download/point.json``).

Each journal line is one fact, appended and flushed to disk once it is true: a file written (its bag path, the
SHA-256 and size of the bytes on disk, book, page, and ``listing``: the listing's digest of the stored image it
was made from, so a later run knows when the image changed), a page with no held image, or a file removed. Loading
keeps only files still on disk with the recorded digest, skips lines cut by a kill, and deletes the run's own
leftover ``.part`` files (a kill between write and rename), naming them.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["JOURNAL", "POINT", "Journal"]

JOURNAL = ".imagesvc-download/journal.jsonl"
POINT = ".imagesvc-download/point.json"


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass
class Journal:
    dest: Path
    files: dict[str, dict[str, Any]] = field(default_factory=dict)  # bag path -> entry
    unavailable: set[tuple[str, int]] = field(default_factory=set)
    leftovers: list[str] = field(default_factory=list)  # .part files deleted on load
    dropped: list[str] = field(default_factory=list)  # recorded files missing or changed on disk
    point: int | None = None  # the highest change-feed sequence number the bag has caught up with
    existed: bool = False

    @classmethod
    def load(cls, dest: Path, *, check: bool = True) -> Journal:
        journal = cls(dest)
        path = dest / JOURNAL
        journal.existed = path.exists()
        path.parent.mkdir(parents=True, exist_ok=True)
        if journal.existed:
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue  # a line cut by a kill
                if not isinstance(entry, dict):
                    continue
                if entry.get("image_unavailable"):
                    journal.unavailable.add((entry["book"], entry["page"]))
                elif entry.get("removed"):
                    journal.files.pop(entry["path"], None)
                elif "path" in entry:
                    journal.unavailable.discard((entry["book"], entry["page"]))
                    journal.files[entry["path"]] = entry
        if check:
            for bag_path, entry in list(journal.files.items()):
                file = dest / bag_path
                intact = file.is_file() and file.stat().st_size == entry["bytes"]
                if not intact or file_digest(file) != entry["sha256"]:
                    del journal.files[bag_path]
                    journal.dropped.append(bag_path)
        if (dest / "data").is_dir():
            for part in sorted((dest / "data").rglob("*.part")):
                part.unlink()
                journal.leftovers.append(str(part.relative_to(dest)))
        try:
            point = json.loads((dest / POINT).read_text(encoding="utf-8")).get("seq")
            journal.point = point if type(point) is int else None
        except (OSError, ValueError, AttributeError):
            journal.point = None
        return journal

    def append(self, entry: dict[str, Any]) -> None:
        with open(self.dest / JOURNAL, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        if entry.get("image_unavailable"):
            self.unavailable.add((entry["book"], entry["page"]))
        elif entry.get("removed"):
            self.files.pop(entry["path"], None)
        else:
            self.unavailable.discard((entry["book"], entry["page"]))
            self.files[entry["path"]] = entry

    def save_point(self, seq: int) -> None:
        self.point = seq
        temporary = self.dest / (POINT + ".tmp")
        temporary.write_text(json.dumps({"seq": seq}), encoding="utf-8")
        os.replace(temporary, self.dest / POINT)

    def books(self) -> set[str]:
        return {e["book"] for e in self.files.values()} | {b for b, _ in self.unavailable}
