#!/usr/bin/env bash
# Install the viewers and what drives them: Debian's chromium (as root only) and the npm packages pinned by
# viewer/package-lock.json: OpenSeadragon (the reading page's deep-zoom viewer, served by the app under /viewer/),
# Mirador 4.0.0 (tests/viewer/test_mirador.py) and playwright-core, which drives the system Chromium in the browser
# tests (tests/viewer, tests/pages) and downloads no browser. Idempotent: `npm ci` runs only when package.json or
# package-lock.json changed since the last install.
# Without root or npm it installs what it can, says what is missing, and exits 0 (the test then skips, or fails on CI).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -x /usr/bin/chromium ]]; then
    echo "install-viewer: chromium present"
elif [[ $(id -u) -eq 0 ]]; then
    export DEBIAN_FRONTEND=noninteractive
    # Try the current package lists first: an update costs time and is only needed on a machine that never had one.
    apt-get install -y --no-install-recommends chromium >/dev/null 2>&1 \
        || { apt-get update && apt-get install -y --no-install-recommends chromium; }
    echo "install-viewer: installed chromium"
else
    echo "install-viewer: not root, chromium missing: run 'sudo apt-get install chromium'"
fi

if ! command -v npm >/dev/null 2>&1; then
    echo "install-viewer: npm not found, viewer/node_modules not installed"
    exit 0
fi
stamp="viewer/node_modules/.installed-$(cat viewer/package.json viewer/package-lock.json | cksum | cut -d' ' -f1)"
if [[ -f $stamp ]]; then
    echo "install-viewer: viewer/node_modules is current"
    exit 0
fi
(cd viewer && npm ci --no-audit --no-fund)
touch "$stamp"
echo "install-viewer: installed viewer/node_modules"
