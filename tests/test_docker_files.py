"""The docker/ files, checked with the tools that run without a Docker engine; each check skips, naming the missing
tool, where that tool is not installed (docs/deploy.md says which ran)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
import yaml
from aiohttp import web

from imagesvc.settings import SettingsError, load_settings
from tests.parts import missing_part
from tests.servers import PORT_TAKEN, PortTaken, free_port, retry_port_taken

DOCKER = Path(__file__).resolve().parent.parent / "docker"
SECRETS = {
    "POSTGRES_PASSWORD": "pg-pw",
    "MINIO_ROOT_PASSWORD": "minio-pw",
    "IMAGESVC_SESSION_SECRET": "s",
    "IMAGESVC_COLOPHON_SECRET": "c",
}


def _tool(*names: str) -> str:
    for name in names:
        found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
        if found:
            return found
    missing_part(f"none of {', '.join(names)} is installed (make test installs them)")


def _compose_config(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``docker compose config`` (v2 plugin) or ``docker-compose config`` (v1): both resolve without an engine."""
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        command = [docker, "compose"]
    else:
        command = [_tool("docker-compose")]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("IMAGESVC_", "MINIO_"))} | env
    return subprocess.run(
        [*command, "-f", str(DOCKER / "compose.yaml"), "config"], env=full_env, capture_output=True, text=True
    )


def test_dockerfile_passes_hadolint() -> None:
    hadolint = _tool("hadolint")
    done = subprocess.run([hadolint, str(DOCKER / "Dockerfile")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_dockerfile_runs_json_logs_as_non_root_with_a_healthcheck() -> None:
    text = (DOCKER / "Dockerfile").read_text()
    stages = re.findall(r"^FROM .+ AS (\w+)$", text, flags=re.MULTILINE)
    assert stages == ["builder", "runtime"]
    runtime = text.split("AS runtime", 1)[1]
    assert re.search(r"^USER 10001:10001$", runtime, flags=re.MULTILINE)
    assert "IMAGESVC_LOG_FORMAT=json" in runtime
    assert "/health/live" in runtime.split("HEALTHCHECK", 1)[1]  # liveness: no restart for a dependency's outage
    assert '"torch==2.13.0"' in text and "download.pytorch.org/whl/cpu" in text


def test_compose_config_resolves_and_its_app_settings_load() -> None:
    done = _compose_config(SECRETS)
    assert done.returncode == 0, done.stderr
    config = yaml.safe_load(done.stdout)
    services = config["services"]
    assert {"app1", "app2", "postgres", "minio", "minio-init", "redis", "proxy"} <= services.keys()
    for name in ("app1", "app2", "ingester"):
        environment = {k: str(v) for k, v in services[name]["environment"].items()}
        try:
            settings = load_settings(environment)  # every variable is a real setting and every value parses
        except SettingsError as exc:
            pytest.fail(f"{name}: {exc}")
        assert settings.storage == "s3" and settings.access_backend == "redis" and settings.log_format == "json"
        # one catalog for every node and ingester, and no per-node data: nothing is mounted at the data dir
        assert settings.catalog == "postgres" and "@postgres:5432/" in settings.database_url
        assert not settings.snapshot_prefix
        targets = [v["target"] if isinstance(v, dict) else v.split(":")[1] for v in services[name].get("volumes", [])]
        assert not [t for t in targets if t.startswith("/data")], targets
        assert "postgres" in services[name]["depends_on"]
        grace = services[name]["stop_grace_period"]
        assert int(grace.rstrip("s")) > settings.shutdown_timeout  # Docker must not SIGKILL mid-drain
        if name != "ingester":  # a serving node is healthy when it is ready
            assert "/health/ready" in " ".join(services[name]["healthcheck"]["test"])
    # the search indexes are computed once, by a one-shot `imagesvc index` with a lasting work dir of its own
    index = services["index"]
    assert index["command"] == ["imagesvc", "index", "--quiet"] and "tools" in index["profiles"]
    assert load_settings({k: str(v) for k, v in index["environment"].items()}).catalog == "postgres"
    targets = [v["target"] if isinstance(v, dict) else v.split(":")[1] for v in index["volumes"]]
    assert targets == ["/data"], targets


def test_compose_refuses_to_start_without_secrets() -> None:
    done = _compose_config({})
    assert done.returncode != 0
    assert "MINIO_ROOT_PASSWORD" in done.stderr or "POSTGRES_PASSWORD" in done.stderr
    without_postgres = _compose_config({k: v for k, v in SECRETS.items() if k != "POSTGRES_PASSWORD"})
    assert without_postgres.returncode != 0 and "POSTGRES_PASSWORD" in without_postgres.stderr


def test_nginx_config_is_valid(tmp_path: Path) -> None:
    """``nginx -t`` on docker/nginx.conf, with the compose host names and the cache path swapped for local ones
    (upstream names must resolve when nginx loads the file, and app1/app2/minio exist only on the compose network)."""
    nginx = _tool("nginx")
    text = (DOCKER / "nginx.conf").read_text()
    for host, port in (("app1:8080", 18081), ("app2:8080", 18082), ("minio:9000", 19000)):
        assert f"server {host}" in text
        text = text.replace(f"server {host}", f"server 127.0.0.1:{port}")
    text = text.replace("/var/cache/nginx/imagesvc", str(tmp_path / "cache"))
    (tmp_path / "logs").mkdir()
    conf = tmp_path / "nginx.conf"
    conf.write_text(text)
    done = subprocess.run(
        [nginx, "-t", "-p", str(tmp_path), "-c", str(conf), "-g", f"pid {tmp_path / 'nginx.pid'};"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "test is successful" in done.stderr


def test_nginx_takes_a_whole_upload_for_search_by_image_and_cuts_off_trickled_bodies() -> None:
    """The proxy must pass the largest upload the app accepts (10 MiB, 4/3 of it as base64 JSON), on the REST route
    and the page alike, and must not hold a connection for a body sent a byte every few seconds."""
    text = (DOCKER / "nginx.conf").read_text()
    location = text[text.index("location ~ ^/(api/gallery/)?search-by-image$") :].split("}", 1)[0]
    size = re.search(r"client_max_body_size (\d+)m;", location)
    assert size is not None and int(size.group(1)) * 2**20 >= load_settings({}).upload_max_bytes * 4 // 3
    assert "proxy_request_buffering on;" in location
    body_timeout = re.search(r"client_body_timeout (\d+)s;", text)
    assert body_timeout is not None and int(body_timeout.group(1)) <= 15
    read_timeout = re.search(r"proxy_read_timeout (\d+)s;", location)
    assert read_timeout is not None and int(read_timeout.group(1)) <= 30


async def test_nginx_refuses_a_flood_of_searches_by_image_before_a_worker_reads_them(tmp_path: Path) -> None:
    """The proxy of docker/compose.yaml, run for real in front of a counting upstream: one address sending 40
    uploads at once reaches the app with a handful (the rate and its burst), and every other answer is nginx's 429;
    other routes are not limited."""
    nginx = _tool("nginx")
    seen: list[str] = []

    async def upstream(request: web.Request) -> web.Response:
        await request.read()
        seen.append(request.path)
        return web.json_response({"items": []})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", upstream)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    app_port = runner.addresses[0][1]
    base = (DOCKER / "nginx.conf").read_text()
    for host in ("app1:8080", "app2:8080", "minio:9000"):
        base = base.replace(f"server {host}", f"server 127.0.0.1:{app_port}")
    base = base.replace("/var/cache/nginx/imagesvc", str(tmp_path / "cache"))
    (tmp_path / "logs").mkdir()
    command = [nginx, "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")]

    def start_proxy() -> tuple[subprocess.Popen[bytes], int]:
        """nginx on a free port (it cannot bind port 0 and say which): again on another if that one was taken."""
        port = free_port()
        (tmp_path / "nginx.conf").write_text(base.replace("listen 80;", f"listen 127.0.0.1:{port};"))
        with (tmp_path / "nginx.log").open("ab") as log:
            proc = subprocess.Popen(
                [*command, "-g", f"daemon off; pid {tmp_path / 'nginx.pid'};"], stdout=log, stderr=log
            )
        while not _answers(port):  # a bound only a hang reaches
            if proc.poll() is not None:
                output = (tmp_path / "nginx.log").read_text(errors="replace")
                raise (PortTaken if PORT_TAKEN.search(output) else AssertionError)(output[-2000:])
            assert time.monotonic() - started < 60, "nginx did not answer"
            time.sleep(0.05)
        assert proc.poll() is None, "nginx exited after its port answered: another process had it"
        return proc, port

    started = time.monotonic()
    proxy, proxy_port = await asyncio.to_thread(retry_port_taken, start_proxy)
    try:
        async with aiohttp.ClientSession() as http:
            url = f"http://127.0.0.1:{proxy_port}/api/gallery/search-by-image"

            async def upload() -> int:
                async with http.post(url, data=b"\\xff\\xd8 not really a picture") as r:
                    await r.read()
                    return r.status

            statuses = await asyncio.gather(*(upload() for _ in range(40)))
            searches = seen.count("/api/gallery/search-by-image")
            assert statuses.count(429) >= 30 and searches <= 8, (statuses, searches)
            assert statuses.count(200) == searches
            for _ in range(10):  # the rest of the API is not held to it
                async with http.get(f"http://127.0.0.1:{proxy_port}/api/books") as r:
                    assert r.status == 200
    finally:
        proxy.terminate()
        proxy.wait(10)
        await runner.cleanup()


def _answers(port: int) -> bool:
    """Whether anything accepts a connection on loopback ``port``."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True
