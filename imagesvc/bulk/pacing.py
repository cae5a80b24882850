"""Client-side pacing for ``imagesvc download``: stay inside a key's request limit, read from the server's headers.

The server counts requests in a sliding log: at most ``q`` in any ``w`` seconds (``RateLimit-Policy:
"requests";q=600;w=60``). The pacer keeps the same log of its own request starts and waits while ``q`` of them fall
within the last ``w`` seconds plus a margin (a request's arrival is later than its start, by a latency that varies),
so it never sends the one that would be refused: full speed, no 429 in steady state. It also believes the server
when the server knows of more (``"requests";r=0;t=12`` after requests made elsewhere), and a 429's ``Retry-After``
pauses every worker, capped at ``max_wait`` seconds. It runs on the event loop: ``wait`` is a coroutine.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections import deque
from collections.abc import Callable, Mapping

__all__ = ["Pacer", "parse_limits"]

MARGIN = 0.5  # seconds added to the window: latency between a request's start here and its arrival there
_ITEM = re.compile(r'"(?P<name>[^"]+)"(?P<params>(?:;[a-z]+=\d+)*)')


def parse_limits(value: str) -> dict[str, dict[str, int]]:
    """``{name: {param: int}}`` from a RateLimit or RateLimit-Policy header value (unknown parts ignored)."""
    out: dict[str, dict[str, int]] = {}
    for match in _ITEM.finditer(value or ""):
        params = dict(p.split("=") for p in match["params"].split(";") if p)
        out[match["name"]] = {k: int(v) for k, v in params.items()}
    return out


class Pacer:
    """``await wait()`` before each request, ``observe(headers, status)`` after it (one event loop)."""

    def __init__(
        self,
        max_wait: float = 60.0,
        say: Callable[[str], None] = lambda _: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.quota: int | None = None  # unknown until the first response says
        self.window = 60.0
        self.max_wait = max_wait
        self.say = say
        self.clock = clock
        self.starts: deque[float] = deque()
        self.blocked_until = 0.0
        self.refusals = 0
        self._first: asyncio.Event | None = None  # one request goes first to learn the policy

    def delay(self) -> float:
        """Seconds until one more request fits the limit; 0: it fits, and is counted as started now."""
        now = self.clock()
        while self.starts and self.starts[0] <= now - self.window - MARGIN:
            self.starts.popleft()
        delay = self.blocked_until - now
        if delay <= 0 and (self.quota is None or len(self.starts) < self.quota):
            self.starts.append(now)
            return 0.0
        if delay <= 0:
            delay = self.starts[0] + self.window + MARGIN - now
        return max(delay, 0.01)

    async def wait(self) -> None:
        """Return once one more request fits the limit, counted as started."""
        if self._first is None:  # the first caller goes at once; others wait (bounded) for its answer
            self._first = asyncio.Event()
            self.starts.append(self.clock())
            return
        if not self._first.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._first.wait(), timeout=30)
        while (delay := self.delay()) > 0:
            await asyncio.sleep(min(delay, 1.0))

    def observe(self, headers: Mapping[str, str], status: int, *, say: bool = True) -> None:
        """Learn the policy and the server's count from a response; after a 429 of the request limit (``say``: the
        caller waits it out) hold every request back, capped at ``max_wait``, and say so."""
        policy = parse_limits(headers.get("RateLimit-Policy", "")).get("requests")
        state = parse_limits(headers.get("RateLimit", "")).get("requests")
        if policy:
            self.quota, self.window = policy["q"], float(policy["w"])
        if state and state.get("r", 1) == 0 and state.get("t"):
            self.blocked_until = max(self.blocked_until, self.clock() + min(state["t"], self.max_wait))
        if status == 429 and say:
            self.refusals += 1
            try:
                retry = float(headers.get("Retry-After", "1") or 1)
            except ValueError:
                retry = 1.0
            wait = min(retry, self.max_wait)
            self.blocked_until = max(self.blocked_until, self.clock() + wait)
            self.say(
                f"server said 429: waiting {wait:.0f} s (Retry-After {retry:.0f} s, capped at {self.max_wait:.0f})"
            )
        if self._first is None:
            self._first = asyncio.Event()
        self._first.set()
