#!/usr/bin/env bash
# FreeDict's Arabic-English dictionary, which glosses Arabic gallery queries (imagesvc/search/glosses.py): Debian's
# dict-freedict-ara-eng (GPL-2+, ~1.5 MB), unpacked into the environment's share/dictd, without root.
# `arabic-dictionary.sh VENV`. Nothing to do where it is there already, or the system has it (/usr/share/dictd,
# from `apt-get install dict-freedict-ara-eng`). Where apt cannot fetch it (not Debian, no package lists), it says so
# and exits 0: Arabic queries are then ranked without glosses, and `imagesvc doctor` says which languages are glossed.
set -uo pipefail
venv=${1:-.venv}
name=freedict-ara-eng
target="$venv/share/dictd"
there() { [ -f "$1/$name.index" ] && [ -f "$1/$name.dict.dz" ]; }
if there "$target" || there /usr/share/dictd; then
  exit 0
fi
if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
  echo "arabic-dictionary: no apt here; Arabic queries are ranked without dictionary glosses" >&2
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! (cd "$work" && apt-get download -q dict-freedict-ara-eng >/dev/null 2>&1); then
  echo "arabic-dictionary: apt could not fetch dict-freedict-ara-eng; Arabic queries are ranked without dictionary" \
    "glosses (after 'apt-get update' as root, run: bash scripts/arabic-dictionary.sh $venv)" >&2
  exit 0
fi
dpkg-deb -x "$work"/dict-freedict-ara-eng_*.deb "$work/root" \
  && mkdir -p "$target" \
  && cp "$work/root/usr/share/dictd/$name.dict.dz" "$work/root/usr/share/dictd/$name.index" "$target/" \
  || { echo "arabic-dictionary: the package could not be unpacked; Arabic queries are ranked without glosses" >&2; exit 0; }
