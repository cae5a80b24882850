"""Rewrite README.md's configuration table from the Settings dataclass (run after adding a setting)."""

from __future__ import annotations

import re
from pathlib import Path

from imagesvc.settings import FIELDS, env_name

README = Path(__file__).resolve().parent.parent / "README.md"


def table() -> str:
    rows = ["| Variable | Default | Meaning |", "|---|---|---|"]
    for spec in FIELDS:
        default = spec.default
        if isinstance(default, tuple):
            default = ",".join(default)
        if spec.name == "workers":
            default = "number of CPU cores"
        shown = f"`{default}`" if default not in ("", None) else "(empty)"
        rows.append(f"| `{env_name(spec)}` | {shown} | {spec.metadata['help']} |")
    return "\n".join(rows)


def main() -> None:
    text = README.read_text(encoding="utf-8")
    new = re.sub(
        r"(<!-- settings:start -->\n).*?(<!-- settings:end -->)",
        lambda m: m.group(1) + table() + "\n" + m.group(2),
        text,
        flags=re.S,
    )
    README.write_text(new, encoding="utf-8")


if __name__ == "__main__":
    main()
