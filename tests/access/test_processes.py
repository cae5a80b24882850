"""Two OS processes sharing one SQLite file never grant more than the budget between them."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from imagesvc.access.sqlite import SqliteAccess

_WORKER = """
import asyncio, sys
from imagesvc.access import Reservation
from imagesvc.access.sqlite import SqliteAccess

async def main() -> None:
    access = SqliteAccess(sys.argv[1])
    async def one() -> bool:
        got = await access.reserve("ip:203.0.113.7", "images", 1, 300)
        return isinstance(got, Reservation) and await access.commit(got)
    results = await asyncio.gather(*(one() for _ in range(400)))
    await access.close()
    print(sum(results))

asyncio.run(main())
"""


async def test_two_processes_share_one_exact_budget(tmp_path: Path) -> None:
    path = tmp_path / "access.sqlite3"
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", _WORKER, str(path), stdout=asyncio.subprocess.PIPE, cwd=Path(__file__).parents[2]
        )
        for _ in range(2)
    ]
    outputs = [await proc.communicate() for proc in procs]
    assert all(proc.returncode == 0 for proc in procs)
    granted = [int(out.decode()) for out, _ in outputs]
    assert sum(granted) == 300, granted
    access = SqliteAccess(path)
    try:
        assert (await access.usage("ip:203.0.113.7", "images", 300)).used == 300
    finally:
        await access.close()
