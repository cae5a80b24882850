"""HTTP for ``imagesvc download``: one aiohttp session, the key sent only to the origin given, every answer bounded,
transient failures retried.

- **The key stays home.** Redirects are not followed by aiohttp: one to the same origin (scheme, host and port) is
  followed here (at most ``MAX_REDIRECTS``); one anywhere else, https to http included, is an error and the key is
  not sent there.
- **Bounded answers.** A JSON answer larger than ``max_json`` bytes is refused while it is read, not after.
- **Little paid for and lost.** The server bills an archive's image once the client's TCP acknowledged its last byte
  (docs/operations.md, "Delivered means received"): bytes in this machine's receive buffer count as received. Each
  connection's buffer is set to ``RECEIVE_BUFFER`` (the kernel doubles it) before it connects, so a run killed
  mid-archive has been billed for at most that much it never wrote, rather than for the several MB the kernel would
  otherwise grow the buffer to. At 512 KiB a round trip that still moves 10 MB/s a connection at 50 ms.
- **Retried.** A connection that fails or breaks, a timeout and a 5xx are retried up to ``retries`` times with
  exponential backoff capped at ``max_wait`` (``Retry-After`` honoured, capped the same, and said on screen). A 429
  of the request limit or the archive slots waits as told and does not count as a failure. A 429 of the image
  budget is ``BudgetSpent`` at once: waiting out a 24-hour window is not a download.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlencode, urljoin, urlsplit

import aiohttp

from imagesvc.bulk.pacing import Pacer

__all__ = ["BudgetSpent", "Http", "Refused", "Transient"]

MAX_REDIRECTS = 5
RECEIVE_BUFFER = 256 << 10
WAITING_POOLS = ("requests", "archives")  # a 429 of these is a pause; of any other pool, a spent budget
MAX_WAITS = 1000  # 429 pauses of one request before it counts as refused (a server that never lets it through)


class Refused(RuntimeError):
    """The server refused (a 4xx other than a pause), or answered what a client must not accept."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Transient(RuntimeError):
    """A failure worth retrying: the connection failed or broke, a timeout, a 5xx."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class BudgetSpent(RuntimeError):
    """The key's image budget is spent: ``retry_after`` seconds until units come back."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def _socket(addr_info: tuple[Any, ...]) -> socket.socket:
    family, kind, proto, _, _ = addr_info
    sock = socket.socket(family=family, type=kind, proto=proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)  # before connecting: the window follows it
    return sock


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


class Http:
    """GETs against the REST base ``base`` with the key, paced by ``pacer``; see the module's docstring."""

    def __init__(
        self,
        base: str,
        key: str,
        *,
        pacer: Pacer,
        retries: int,
        timeout: float,
        max_wait: float,
        max_json: int,
        connections: int,
        say: Callable[[str], None],
    ) -> None:
        self.base, self.key, self.pacer = base.rstrip("/"), key, pacer
        self.retries, self.max_wait, self.max_json, self.say = retries, max_wait, max_json, say
        self.origin = _origin(self.base)
        self.requests = 0
        self.retried = 0
        self._timeout = aiohttp.ClientTimeout(total=None, connect=timeout, sock_connect=timeout, sock_read=timeout)
        self._connections = connections
        self.session: aiohttp.ClientSession | None = None
        self.stopping = asyncio.Event()  # set by the caller to cut a backoff short

    async def __aenter__(self) -> Http:
        connector = aiohttp.TCPConnector(
            limit=self._connections, limit_per_host=self._connections, socket_factory=_socket
        )
        self.session = aiohttp.ClientSession(connector=connector, timeout=self._timeout, auto_decompress=False)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.session is not None:
            await self.session.close()

    def url(self, path: str, params: dict[str, Any] | None = None) -> str:
        return f"{self.base}{path}" + (f"?{urlencode(params)}" if params else "")

    async def backoff(self, attempt: int, failure: Transient, what: str) -> None:
        """Wait before retry ``attempt`` (1-based): ``Retry-After`` if the server gave one, else 2^attempt s with
        jitter; both capped at ``max_wait``, and said."""
        told = failure.retry_after
        wait = min(self.max_wait, told if told is not None else min(2.0**attempt, 60.0) * random.uniform(0.5, 1.0))
        cause = f"Retry-After {told:.0f} s, capped at {self.max_wait:.0f}" if told is not None else "backoff"
        self.say(f"{what}: {failure}; retry {attempt} of {self.retries} in {wait:.1f} s ({cause})")
        self.retried += 1
        with contextlib.suppress(TimeoutError):  # a Ctrl-C meanwhile ends the wait
            await asyncio.wait_for(self.stopping.wait(), timeout=wait)

    @asynccontextmanager
    async def get(self, path: str, params: dict[str, Any] | None = None) -> AsyncIterator[aiohttp.ClientResponse]:
        """One GET, answered 2xx (the response, open for streaming); ``Transient`` for what may be retried, after
        ``Retry-After`` pauses of a 429 of the request limit; ``BudgetSpent``; ``Refused``. Not retried here: the
        caller knows where to resume."""
        assert self.session is not None
        url = self.url(path, params)
        for _ in range(MAX_WAITS):
            response = await self._follow(url)
            if response.status == 429:
                body = await self._error_body(response)
                pool = str(body.get("pool", "requests"))
                retry = _seconds(response.headers.get("Retry-After")) or float(body.get("retry_after_seconds") or 1)
                self.pacer.observe(response.headers, 429, say=pool in WAITING_POOLS)
                if pool not in WAITING_POOLS:
                    raise BudgetSpent(str(body.get("message") or f"the {pool} budget is spent"), retry)
                continue  # the pacer holds every request back for the Retry-After (capped), said on screen
            try:
                if response.status >= 500:
                    body = await self._error_body(response)
                    retry = _seconds(response.headers.get("Retry-After"))
                    raise Transient(f"HTTP {response.status}: {body.get('message', '')}".rstrip(": "), retry)
                if response.status >= 300:
                    body = await self._error_body(response)
                    raise Refused(f"HTTP {response.status} for {path}: {body.get('message', '')}", response.status)
                yield response
                return
            finally:
                response.release()
        raise Refused(f"still paused (429) after {MAX_WAITS} waits: {path}", 429)

    async def _follow(self, url: str) -> aiohttp.ClientResponse:
        assert self.session is not None
        for _ in range(MAX_REDIRECTS + 1):
            await self.pacer.wait()
            self.requests += 1
            try:
                response = await self.session.get(
                    url, headers={"Authorization": f"Bearer {self.key}"}, allow_redirects=False
                )
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                raise Transient(f"{type(exc).__name__}: {exc}".rstrip(": ")) from None
            self.pacer.observe(response.headers, response.status)
            if response.status not in (301, 302, 303, 307, 308):
                return response
            location = response.headers.get("Location", "")
            response.release()
            target = urljoin(url, location)
            if _origin(target) != self.origin:
                shown = "://".join(_origin(target)[:2])
                raise Refused(
                    f"the server redirected to {shown}, another origin than {'://'.join(self.origin[:2])}: "
                    "not followed, and the key was not sent there",
                    response.status,
                )
            url = target
        raise Refused(f"more than {MAX_REDIRECTS} redirects", None)

    async def _error_body(self, response: aiohttp.ClientResponse) -> dict[str, Any]:
        try:
            raw = await response.content.read(self.max_json)
            body = json.loads(raw)
        except (aiohttp.ClientError, TimeoutError, ValueError, OSError):
            return {}
        return body if isinstance(body, dict) else {}

    async def json(self, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """A JSON object from ``path``, retried as the module says; ``Refused`` when larger than ``max_json``."""
        for attempt in range(self.retries + 1):
            try:
                async with self.get(path, params) as response:
                    raw = bytearray()
                    async for chunk in response.content.iter_chunked(1 << 16):
                        raw += chunk
                        if len(raw) > self.max_json:
                            raise Refused(f"the answer for {path} is larger than {self.max_json} bytes; not read on")
                try:
                    body = json.loads(raw)
                except ValueError:
                    raise Refused(f"the answer for {path} is not JSON") from None
                if not isinstance(body, dict):
                    raise Refused(f"the answer for {path} is not a JSON object")
                return body
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                failure = Transient(f"{type(exc).__name__}: {exc}".rstrip(": "))
            except Transient as exc:
                failure = exc
            if attempt == self.retries:
                raise failure
            await self.backoff(attempt + 1, failure, path)
        raise AssertionError("unreachable")
