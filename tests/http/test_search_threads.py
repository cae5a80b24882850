"""Gallery search's work in threads (snapshot builds, keyword matching, ranking) reads the catalog directly, past its
gate, so a catalog that hangs mid-read holds those threads until it answers. They are search's own: a search never
needs, and so never holds, a thread of the loop's default pool, which the local store's reads and the public tiers
under ``/img/`` use. Shown by taking every default thread away: a gallery search (its first, which builds the
snapshot, then a text query) is still answered."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

BOUND = 30.0  # seconds only a hang reaches


async def test_a_gallery_search_needs_no_thread_of_the_default_pool(client: Any) -> None:
    loop = asyncio.get_running_loop()
    release = threading.Event()
    busy = [loop.run_in_executor(None, release.wait, BOUND) for _ in range(64)]  # every default thread taken
    try:
        for query in ("furnace", "alembic furnace"):
            async with asyncio.timeout(BOUND - 5):
                resp = await client.get("/api/gallery", params={"q": query})
                assert resp.status == 200, await resp.text()
                assert (await resp.json())["items"], query
    finally:
        release.set()
        await asyncio.gather(*busy)
