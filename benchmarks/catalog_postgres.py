"""A PostgreSQL cluster that outlives one benchmark run, for catalogs too large to write again each run.

``persistent_postgres(DIR)`` makes a cluster in ``DIR`` on its first call (Debian's ``postgresql`` package, as the
tests' ``tests/servers.start_postgres``; as root it runs as ``nobody``) and starts it on a free loopback port on each
call; ``server.stop()`` stops it and leaves its data. Settings are PostgreSQL's defaults except what a bulk load on
a throw-away cluster wants (no fsync, larger WAL between checkpoints) and ``shared_buffers`` of 1 GB, a common
setting for a database host.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.servers import PG_BIN_DIRS, PostgresServer, ServerUnavailable, free_port

__all__ = ["database_bytes", "persistent_postgres"]

SETTINGS = {"shared_buffers": "1GB", "max_wal_size": "2GB", "checkpoint_timeout": "30min", "work_mem": "16MB"}


def persistent_postgres(workdir: Path) -> PostgresServer:
    """The cluster in ``workdir`` (made on the first call), started; its ``url`` reaches the ``imagesvc`` database."""
    bindir = next((d for d in PG_BIN_DIRS if (d / "initdb").exists()), None)
    if bindir is None:
        raise ServerUnavailable("PostgreSQL is not installed (scripts/install-system-deps.sh installs postgresql)")
    user = "nobody" if os.geteuid() == 0 else None
    datadir = workdir / "pgdata"
    fresh = not (datadir / "PG_VERSION").exists()
    if fresh:
        workdir.mkdir(parents=True, exist_ok=True)
        if user:
            shutil.chown(workdir, user)
        command = [str(bindir / "initdb"), "-D", str(datadir), "-U", "postgres", "-A", "trust", "-E", "UTF8"]
        command += ["--no-sync", "--locale=C"]
        subprocess.run((["runuser", "-u", user, "--"] if user else []) + command, capture_output=True, check=True)
        with (datadir / "postgresql.auto.conf").open("a") as conf:
            conf.writelines(f"{name} = '{value}'\n" for name, value in SETTINGS.items())
    elif (datadir / "postmaster.pid").exists():  # a run killed without stopping its server: stop it first
        stop = [str(bindir / "pg_ctl"), "-D", str(datadir), "-m", "fast", "-w", "stop"]
        subprocess.run((["runuser", "-u", user, "--"] if user else []) + stop, capture_output=True, check=False)
    port = free_port()
    server = PostgresServer(f"postgresql://postgres@127.0.0.1:{port}/imagesvc", port, datadir, bindir, user)
    server.start()
    if fresh:
        subprocess.run(
            [str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "imagesvc"],
            capture_output=True,
            check=True,
        )
    return server


def database_bytes(catalog: Any) -> int:
    """The size on disk of the database a PostgreSQL catalog is in (tables, TOAST and indexes)."""
    return int(catalog.scalar("SELECT pg_database_size(current_database())"))
