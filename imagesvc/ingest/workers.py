"""The process pool of ingest and rebake, whose workers exit when the process that started them dies.

A SIGKILLed ``imagesvc ingest`` (an OOM kill, ``kill -9``) cannot shut its pool down: without this its workers, and
the multiprocessing resource tracker they keep alive, lived on forever (one held 958 MiB six minutes later). Each
worker runs a watchdog thread that polls its parent pid and exits at once when it changes (the worker has been
re-parented). The tracker exits by itself once the last worker holding its pipe is gone.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor

__all__ = ["WATCH_INTERVAL", "make_pool"]

WATCH_INTERVAL = 0.25  # seconds between two looks at the parent pid


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCH_INTERVAL)
    os._exit(1)  # no cleanup to do: results go to a parent that is gone


def _bind_to_parent(parent: int) -> None:
    """Pool initializer: exit now if the parent is already gone, else start the watchdog."""
    if os.getppid() != parent:
        os._exit(1)
    threading.Thread(target=_watch, args=(parent,), name="parent-watchdog", daemon=True).start()


def make_pool(workers: int) -> ProcessPoolExecutor:
    """A spawn-context pool of ``workers`` processes bound to the life of this process."""
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_bind_to_parent,
        initargs=(os.getpid(),),
    )
