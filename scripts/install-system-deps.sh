#!/usr/bin/env bash
# Install the Debian packages the test suite and the demo need (Redis, PostgreSQL, Ceph RGW, vips, nginx, wrk,
# libmagic, fonts, docker-compose to check docker/compose.yaml without an engine, FreeDict's Arabic-English
# dictionary for Arabic query glosses: bootstrap.sh also unpacks it into the environment without root, tesseract-ocr
# with its English data to read the visible mark back in tests and benchmarks/visible_mark.py), and podman with
# runc, netavark and aardvark-dns (a network whose containers find each other by name) and debootstrap, which build
# and run docker/'s image and compose deployment (tests/containers/).
# Run as root on a fresh Debian machine; as any other user it only prints what to run. Does nothing when all are present.
set -euo pipefail

PACKAGES=(redis-server postgresql radosgw ceph-mon ceph-osd libvips-tools nginx-light wrk libmagic1 fonts-dejavu-core docker-compose dict-freedict-ara-eng)
PACKAGES+=(tesseract-ocr tesseract-ocr-eng)
PACKAGES+=(podman runc netavark aardvark-dns iptables debootstrap)

missing=()
for pkg in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    [[ $status == "install ok installed" ]] || missing+=("$pkg")
done

if ((${#missing[@]} == 0)); then
    echo "install-system-deps: all packages already installed: ${PACKAGES[*]}"
    exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
    echo "install-system-deps: not root, installing nothing. Missing: ${missing[*]}"
    echo "install-system-deps: run: sudo $0"
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends "${missing[@]}"
echo "install-system-deps: installed ${missing[*]}"
