"""docker/compose.yaml brought up with podman: its two imagesvc nodes, PostgreSQL, Redis, an S3 server and the proxy,
each started with ``podman run`` from the service as compose resolves it.

What is taken from compose.yaml as it stands: every app's environment, command and mounts, the network's subnet,
PostgreSQL's and Redis's environment, commands and healthchecks, the proxy's nginx.conf, the bucket and its public
prefix. What stands in for the registry images: one image of Debian's PostgreSQL 15, Redis 7 and nginx, with moto's
S3 server for MinIO (images.py). Two differences are the rig's own: Redis runs with ``--protected-mode no`` (the
official image is built that way), and the proxy has a fixed address so that the public URL is reachable from here.
"""

from __future__ import annotations

import ipaddress
import json
import re
import secrets
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.containers.images import APP_IMAGE, DEPS_IMAGE, PODMAN, REPO, ULIMITS

__all__ = ["Deployment", "interpolate"]

COMPOSE = REPO / "docker" / "compose.yaml"
SECRETS = ("POSTGRES_PASSWORD", "MINIO_ROOT_PASSWORD", "IMAGESVC_SESSION_SECRET", "IMAGESVC_COLOPHON_SECRET")
STARTUP_BOUND_S = 300.0  # generous: two nodes loading their models on a loaded 2-core machine; only a hang exceeds it
S3_INIT = """
import json, os, boto3
s3 = boto3.client("s3", endpoint_url="http://minio:9000", region_name="us-east-1",
                  aws_access_key_id=os.environ["MINIO_ROOT_USER"],
                  aws_secret_access_key=os.environ["MINIO_ROOT_PASSWORD"])
s3.create_bucket(Bucket="imagesvc")
policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": ["*"]},
          "Action": ["s3:GetObject"], "Resource": ["arn:aws:s3:::imagesvc/pub/*"]}]}
s3.put_bucket_policy(Bucket="imagesvc", Policy=json.dumps(policy))
"""


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's variables in every string of a parsed file: ``${VAR}``, ``${VAR:-default}``, ``${VAR:?error}``,
    ``$$`` for a dollar sign (after parsing, as compose does: ``KEY: ${VAR:-}`` is an empty string, not null)."""
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, arg = match.group("name"), match.group("op"), match.group("arg") or ""
        value = env.get(name, "")
        if op == ":-":
            return value or arg
        if op == ":?" and not value:
            raise KeyError(f"{name}: {arg}")
        return value

    return re.sub(r"\$\$|\$\{(?P<name>\w+)(?:(?P<op>:[-?])(?P<arg>[^}]*))?\}", one, value)


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*PODMAN, *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args[:3])} failed: {done.stderr[-2000:]}")
    return done


def wait_for(what: str, ready: Callable[[], bool], bound_s: float = STARTUP_BOUND_S) -> None:
    """Poll ``ready`` until it says yes; fail naming ``what`` after ``bound_s``."""
    deadline = time.monotonic() + bound_s
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {bound_s:.0f} s")
        time.sleep(0.5)


def http_status(url: str, timeout: float = 5.0) -> int | None:
    """The status of a GET, or None when nothing answered within ``timeout``."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, urllib.error.URLError):
        return None


@dataclass
class Deployment:
    """One project's containers on one network, named ``<project>-<service>``; ``down`` removes them all."""

    sources: Path
    project: str = "imagesvc-rig"
    workers: int = 1
    secrets: dict[str, str] = field(default_factory=lambda: {name: secrets.token_hex(16) for name in SECRETS})

    def __post_init__(self) -> None:
        raw = yaml.safe_load(COMPOSE.read_text())
        subnet = ipaddress.ip_network(raw["networks"]["imagesvc"]["ipam"]["config"][0]["subnet"])
        self.subnet = str(subnet)
        # podman hands out addresses after the last one it gave on a network of that name, across removals, so a
        # fixed address inside its range is taken sooner or later: dynamic ones come from the upper half only.
        self.dynamic_range = str(list(subnet.subnets())[1])
        self.proxy_ip = str(subnet.network_address + 80)
        assert ipaddress.ip_address(self.proxy_ip) not in ipaddress.ip_network(self.dynamic_range)
        env = self.secrets | {
            "IMAGESVC_SOURCES": str(self.sources),
            "IMAGESVC_PUBLIC_URL": f"http://{self.proxy_ip}",
            "IMAGESVC_SERVE_WORKERS": str(self.workers),
        }
        self.services: dict[str, dict[str, Any]] = interpolate(raw["services"], env)

    def name(self, service: str) -> str:
        return f"{self.project}-{service}"

    def ip(self, service: str) -> str:
        out = podman("inspect", "--format", "{{json .NetworkSettings.Networks}}", self.name(service)).stdout
        return json.loads(out)[self.project]["IPAddress"]

    def url(self, service: str, port: int = 8080) -> str:
        return f"http://{self.ip(service)}:{port}"

    def _run(self, service: str, image: str, command: list[str], *options: str, detach: bool = True) -> str:
        spec = self.services.get(service, {})
        argv = ["run", "--name", self.name(service), "--label", f"imagesvc.rig={self.project}", *ULIMITS]
        argv += ["--network", self.project, "--network-alias", service, *options]
        for key, value in (spec.get("environment") or {}).items():
            argv += ["--env", f"{key}={value}"]
        for volume in spec.get("volumes") or ():
            host, target, *mode = volume.split(":")
            if host.startswith(("/", ".")):  # a bind mount; named volumes are the containers' own storage here
                source = (COMPOSE.parent / host).resolve()
                argv += ["-v", ":".join([str(source), target, *mode])]
        # One-shots have no use for the image's healthcheck (podman would also ask systemd to schedule it).
        argv += ["-d"] if detach else ["--rm", "--no-healthcheck"]
        return podman(*argv, image, *command, timeout=600).stdout

    def exec_ok(self, service: str, command: list[str]) -> bool:
        return podman("exec", self.name(service), *command, check=False).returncode == 0

    def healthy(self, service: str) -> bool:
        """Compose's own healthcheck of ``service`` (its ``CMD`` form), run in the container."""
        test = self.services[service]["healthcheck"]["test"]
        assert test[0] == "CMD", test
        return self.exec_ok(service, test[1:])

    def up(self) -> None:
        """Start everything and wait until each part answers; a second ``up`` starts afresh."""
        self.down()
        podman("network", "create", "--subnet", self.subnet, "--ip-range", self.dynamic_range, self.project)
        self._run("postgres", DEPS_IMAGE, ["/usr/local/bin/postgres-entrypoint.sh"])
        self._run("redis", DEPS_IMAGE, [*self.services["redis"]["command"], "--protected-mode", "no"], "-w", "/data")
        self._run("minio", DEPS_IMAGE, ["/opt/moto/bin/moto_server", "-H", "0.0.0.0", "-p", "9000"])
        wait_for("postgres healthy", lambda: self.healthy("postgres"))
        wait_for("redis healthy", lambda: self.healthy("redis"))
        wait_for("the S3 server", lambda: http_status(f"http://{self.ip('minio')}:9000/") == 200)
        self._run("minio-init", DEPS_IMAGE, ["/opt/moto/bin/python", "-c", S3_INIT], detach=False)
        for app in ("app1", "app2"):
            self._run(app, APP_IMAGE, list(self.services[app].get("command") or []))
        for app in ("app1", "app2"):  # any answer ends the wait (a node answers while it warms up): it must be 200
            live = f"{self.url(app)}/health/live"
            wait_for(f"{app} answering", lambda live=live: http_status(live) is not None)
            if (status := http_status(live)) != 200:
                raise RuntimeError(f"{app}: /health/live answered {status}\n{self.logs(app)}")
        nginx = ["nginx", "-g", "daemon off;"]
        self._run("proxy", DEPS_IMAGE, nginx, "--ip", self.proxy_ip, "--tmpfs", "/var/cache/nginx")

    def tool(self, service: str, command: list[str]) -> str:
        """Run a one-shot command of the app image with ``service``'s settings (``ingester``, ``index``)."""
        return self._run(service, APP_IMAGE, command, detach=False)

    def logs(self, service: str, tail: int = 40) -> str:
        done = podman("logs", "--tail", str(tail), self.name(service), check=False)
        return done.stdout + done.stderr

    def down(self) -> None:
        ids = podman("ps", "-aq", "--filter", f"label=imagesvc.rig={self.project}").stdout.split()
        if ids:
            podman("rm", "-f", "-t", "2", *ids, timeout=180)
        if podman("network", "exists", self.project, check=False).returncode == 0:
            podman("network", "rm", "-f", self.project)
