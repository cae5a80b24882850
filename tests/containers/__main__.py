"""By hand: ``python -m tests.containers build`` makes the images; ``up SOURCES`` brings docker/compose.yaml's
deployment up with podman (SOURCES mounted at /sources) and prints where each node answers; ``down`` removes it."""

from __future__ import annotations

import argparse
from pathlib import Path

from tests.containers.deployment import Deployment
from tests.containers.images import build_all, podman_problem


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.containers", description=__doc__)
    parser.add_argument("action", choices=("build", "up", "down"))
    parser.add_argument("sources", nargs="?", type=Path, default=Path("."), help="mounted at /sources (up)")
    args = parser.parse_args()
    if problem := podman_problem():
        raise SystemExit(problem)
    if args.action == "build":
        print(*build_all())
        return
    rig = Deployment(sources=args.sources.resolve())
    if args.action == "down":
        rig.down()
        return
    build_all()
    rig.up()
    for service in ("app1", "app2"):
        print(f"{service}: {rig.url(service)}")
    print(f"proxy: http://{rig.proxy_ip}")
    for name, value in rig.secrets.items():
        print(f"{name}={value}")


if __name__ == "__main__":
    main()
