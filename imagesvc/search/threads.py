"""Threads of search's own for its work off the event loop.

Search's work in threads (snapshot builds, keyword matching, the text index's loads, model and numpy work) reads the
catalog directly, past its gate, so a catalog that hangs mid-read holds those threads until it answers. They are
search's own, never the loop's default pool, which the local store's reads and the public tiers under ``/img/`` use:
searches caught in a hang can hold every search thread, and still no public tier waits.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["off_loop", "submit"]

T = TypeVar("T")
# As many threads as asyncio's own default pool would have: search's work is what used to run there.
_POOL = ThreadPoolExecutor(min(32, (os.cpu_count() or 1) + 4), thread_name_prefix="search-work")


async def off_loop(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on search's threads, with the caller's context (as ``asyncio.to_thread`` gives)."""
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_POOL, call)


def submit(fn: Callable[..., Any], /, *args: Any) -> asyncio.Future[Any]:
    """Start ``fn(*args)`` on search's threads without waiting for it (work nobody awaits, such as a warm read)."""
    return asyncio.get_running_loop().run_in_executor(_POOL, functools.partial(fn, *args))
