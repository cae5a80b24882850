"""What a serving process adds to the app (``imagesvc serve``, not the tests' in-process apps).

- The search state warms in the background at start, so the first searches need not wait; on shutdown that warm-up
  is cancelled.
- Work handed to threads (``asyncio.to_thread``) runs in a pool of the app's own, set as the loop's default: a task
  cancelled while its work is still queued cancels that work (asyncio chains the cancellation), and at cleanup
  whatever is still queued is cancelled, so a drained process starts no new CPU work. Work already running finishes
  its call or ends with the process (``serving`` ends a drained process without waiting for threads).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from imagesvc.settings import Settings
from imagesvc.web.app_keys import SERVICES, WARM_UP

__all__ = ["add_serving_hooks"]

log = logging.getLogger("imagesvc.serve")


def add_serving_hooks(app: web.Application, settings: Settings) -> None:
    """Add the warm-up, the drain log line and the thread pool of a serving process to ``app``."""
    warming: set[asyncio.Task[None]] = set()

    async def thread_pool(app: web.Application) -> AsyncIterator[None]:
        # As many threads as asyncio's own default pool would have.
        pool = ThreadPoolExecutor(min(32, (os.cpu_count() or 1) + 4), thread_name_prefix="imagesvc")
        loop = asyncio.get_running_loop()
        loop.set_default_executor(pool)
        try:
            yield
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
            # run_app waits for the default pool's threads at the end: hand it an idle one instead.
            loop.set_default_executor(ThreadPoolExecutor(1))

    async def warm_search(app: web.Application) -> None:
        # The text model and the search indexes load in the background, so the first searches need not wait.
        from imagesvc.search.by_image import warm_up

        task = asyncio.ensure_future(warm_up(app[SERVICES]))
        app[WARM_UP] = task  # /health/ready answers 200 only once it is done
        warming.add(task)
        task.add_done_callback(warming.discard)

    async def announce_drain(app: web.Application) -> None:
        # The listening sockets are closed by now; in-flight requests get shutdown_timeout to finish.
        log.info("stopping: draining in-flight requests for up to %d s", settings.shutdown_timeout)
        for task in list(warming):
            task.cancel()

    app.cleanup_ctx.insert(0, thread_pool)  # first in, last out: the pool outlives every other resource
    app.on_startup.append(warm_search)
    app.on_shutdown.append(announce_drain)
