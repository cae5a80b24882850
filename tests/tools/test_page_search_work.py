"""The admission gate of search inside a book: per-caller places, a bounded queue, and places held until the work
has left its thread (a client that hangs up frees nothing early)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from imagesvc.errors import RateLimited, Unavailable
from imagesvc.tools.page_search_work import PageSearchWork

HANG = 60  # seconds: a bound only a hang reaches


async def _settle(work: PageSearchWork) -> None:
    """Wait until the pool's one thread has finished everything submitted before now: a no-op queued behind it
    returns after their completions were handed to the loop."""
    await asyncio.get_running_loop().run_in_executor(work.pool, lambda: None)


async def test_past_the_queue_a_search_is_a_503_and_past_its_share_a_429() -> None:
    work = PageSearchWork(per_caller=1, threads=1, queue=1)
    async with work.admit("a"), work.admit("b"):
        with pytest.raises(RateLimited) as busy:
            async with work.admit("a"):
                pass
        assert busy.value.headers["Retry-After"] == "2" and busy.value.details["limit"] == "within_book_concurrency"
        with pytest.raises(Unavailable) as full:
            async with work.admit("c"):
                pass
        assert int(full.value.headers["Retry-After"]) > 0
    assert work.state() == {"held": 0, "callers": 0}


async def test_a_search_whose_client_went_away_holds_its_place_until_its_thread_is_done() -> None:
    work = PageSearchWork(per_caller=1, threads=1, queue=4)
    started, release = threading.Event(), threading.Event()

    def slow() -> None:
        started.set()
        release.wait(HANG)

    async def search() -> None:
        async with work.admit("a") as place:
            await place.run(slow)

    task = asyncio.ensure_future(search())
    assert await asyncio.to_thread(started.wait, HANG)
    task.cancel()  # the client hung up: the request's task ends, its work still runs
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(RateLimited):  # so the caller cannot start another meanwhile
        async with work.admit("a"):
            pass
    release.set()
    await _settle(work)
    assert work.state() == {"held": 0, "callers": 0}
    async with work.admit("a") as place:
        assert await place.run(sum, [1, 2]) == 3
