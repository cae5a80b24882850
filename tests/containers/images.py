"""The container images of the test rig, made with podman where no registry image can be pulled: a Debian base from
debootstrap, the production image from docker/Dockerfile on it, and one image for the dependencies (PostgreSQL,
Redis, an S3 server, nginx) from Debian's packages.

Each step is cached: the base carries a label naming its recipe and is remade only when the recipe changes; the two
builds reuse podman's layer cache, so a rebuild after a source change reinstalls only the imagesvc wheel.
No pytest imports here: ``python -m tests.containers build`` runs the same steps by hand.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = [
    "APP_IMAGE",
    "BASE_IMAGE",
    "DEPS_IMAGE",
    "PODMAN",
    "REPO",
    "ULIMITS",
    "build_all",
    "build_app",
    "build_base",
    "build_deps",
    "podman_problem",
]

REPO = Path(__file__).resolve().parent.parent.parent
HERE = Path(__file__).resolve().parent

# This VM runs cgroups v1 in hybrid mode and refuses to raise rlimits: crun and podman's default ulimits fail, runc
# with cgroupfs and these limits work (NOTES.md section 10).
PODMAN = ["podman", "--runtime", "/usr/sbin/runc", "--cgroup-manager=cgroupfs"]
ULIMITS = ["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]

BASE_IMAGE = "localhost/imagesvc-base:bookworm"
APP_IMAGE = "localhost/imagesvc:local"
DEPS_IMAGE = "localhost/imagesvc-rig-deps:bookworm"
# What the official python:3.11-slim-bookworm gives the Dockerfile: Python 3.11 with its venv module, CA certificates.
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
RECIPE_LABEL = "imagesvc.base.recipe"
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")


def podman_problem() -> str | None:
    """Why containers cannot run here (a missing tool, not root), or None when they can."""
    for tool in ("podman", "debootstrap", "/usr/sbin/runc"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (as root: bash scripts/install-system-deps.sh)"
    if os.geteuid() != 0:
        return "podman here runs rootful containers (debootstrap and cgroupfs need root)"
    done = subprocess.run([*PODMAN, "info", "--format", "{{.Host.OCIRuntime.Name}}"], capture_output=True, text=True)
    if done.returncode != 0:
        return f"podman info failed: {done.stderr.strip()[-300:]}"
    return None


def debian_mirror() -> str:
    """The Debian mirror apt uses here (first ``deb``/``URIs:`` line naming a main archive), for debootstrap."""
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        for match in re.finditer(r"^(?:deb|URIs:)\s+(?:\[[^]]*\]\s+)?(\S+)", text, flags=re.MULTILINE):
            url = match.group(1)
            if url.startswith("http") and "security" not in url:
                return url
    return "http://deb.debian.org/debian"


BUILD_BOUND_S = 1800  # a build from nothing takes minutes on a loaded 2-core machine; only a hang takes this long


def _run(argv: list[str], **kwargs: object) -> None:
    subprocess.run(argv, check=True, timeout=BUILD_BOUND_S, **kwargs)  # type: ignore[call-overload]


def _label(image: str, label: str) -> str | None:
    done = subprocess.run(
        [*PODMAN, "image", "inspect", "--format", f'{{{{ index .Labels "{label}" }}}}', image],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() if done.returncode == 0 else None


def build_base() -> str:
    """The Debian bookworm base (minbase plus Python 3.11), made by debootstrap once per recipe; returns its name."""
    mirror = debian_mirror()
    recipe = hashlib.sha256(f"bookworm minbase {' '.join(BASE_PACKAGES)} {mirror}".encode()).hexdigest()[:16]
    if _label(BASE_IMAGE, RECIPE_LABEL) == recipe:
        return BASE_IMAGE
    with tempfile.TemporaryDirectory(prefix="imagesvc-base-") as work:
        rootfs = Path(work) / "rootfs"
        _run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(BASE_PACKAGES)}",
                "bookworm",
                str(rootfs),
                mirror,
            ],
            stdout=subprocess.DEVNULL,
        )
        shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        _run(
            [
                *PODMAN,
                "import",
                "--change",
                f"LABEL {RECIPE_LABEL}={recipe}",
                "--change",
                'CMD ["/bin/bash"]',
                "-",
                BASE_IMAGE,
            ],
            stdin=tar.stdout,
            stdout=subprocess.DEVNULL,
        )
        if tar.wait() != 0:
            raise RuntimeError("tar of the debootstrap tree failed")
    return BASE_IMAGE


def _build(tag: str, containerfile: Path, context: Path, *extra: str) -> str:
    """``podman build`` on the base, on the host's network, with the host's CA bundle for pip where there is one."""
    # Docker's format keeps HEALTHCHECK (OCI's has no field for it) for ``podman healthcheck run``.
    argv = [*PODMAN, "build", "--format", "docker", "--network=host", *ULIMITS, "--layers"]
    argv += ["-f", str(containerfile), "-t", tag]
    argv += ["--build-arg", f"BASE={BASE_IMAGE}"]
    if HOST_CA.is_file():  # a proxy here may re-sign TLS: pip in the build trusts what the host trusts
        argv += ["-v", f"{HOST_CA}:/run/host-ca.crt:ro"]
        argv += ["--build-arg", "PIP_CERT=/run/host-ca.crt", "--build-arg", "SSL_CERT_FILE=/run/host-ca.crt"]
    _run([*argv, *extra, str(context)])
    return tag


def build_app() -> str:
    """The production image from docker/Dockerfile, with its own ignore file, on the local base."""
    return _build(
        APP_IMAGE, REPO / "docker/Dockerfile", REPO, "--ignorefile", str(REPO / "docker/Dockerfile.dockerignore")
    )


def build_deps() -> str:
    """PostgreSQL, Redis, moto's S3 server and nginx from Debian's packages and PyPI, in one image."""
    return _build(DEPS_IMAGE, HERE / "Containerfile.deps", HERE)


def build_all() -> tuple[str, str]:
    """Base, production image and dependency image, each reused where nothing it is made from changed."""
    build_base()
    return build_app(), build_deps()
