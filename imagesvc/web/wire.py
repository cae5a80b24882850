"""How far a client has received a response: stream positions of one connection, and the keeper that settles a
metered delivery by them, renews its reservations and ends a reader that stalls.

On Linux every TCP socket reports ``tcpi_bytes_acked`` (``TCP_INFO``): the bytes of the stream the client's TCP
acknowledged, i.e. bytes that reached the client's machine. A position is taken after the last byte of a unit was
handed to the transport: bytes acknowledged + bytes queued in the kernel (``SIOCOUTQ``) + bytes still in the
transport's buffer. The unit counts as received once ``tcpi_bytes_acked`` reaches that position. The two kernel
counters are read as one snapshot (acknowledged, queued, acknowledged again, until both readings agree): an
acknowledgement landing between two reads would otherwise count its bytes twice, a position the client never reaches,
and the wait for it would hold the connection (and a kept-alive client's next request on it). The socket is
duplicated for the delivery's length, so that its counters can still be read after the client hung up.

The bound: a unit charged but not read by the client's program is one whose every byte sits in the client's
kernel receive buffer (at most its receive window, about 64-128 KiB for a reader that reads nothing, never more than
its ``SO_RCVBUF``). Where ``TCP_INFO`` cannot be read (another system, a Unix socket, TLS terminated in process), a
unit counts once its last byte left the process for the kernel: the bound is then the kernel's send buffer plus the
client's receive window.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import socket
import struct
import sys
import termios
from collections.abc import Iterator
from types import TracebackType

from imagesvc.access.ledger import Ledger

__all__ = ["Keeper", "Wire"]

log = logging.getLogger(__name__)

_BYTES_ACKED = 120  # offset of tcpi_bytes_acked (u64) in Linux's struct tcp_info, present since Linux 4.1
_TCP_INFO_SIZE = 256
_OPEN_STATES = (1, 8)  # TCP_ESTABLISHED, TCP_CLOSE_WAIT: the send queue is still the stream's (a reset empties it)


def _waits() -> Iterator[float]:
    """Pauses between looks for the final acknowledgement. A keep-alive client's next request carries it and waits
    for this, so the first 20 ms are looked at every millisecond or less; a client that does not read costs four
    looks a second after the first second."""
    yield from [0.0] + [0.00025] * 8  # the first 2 ms
    yield from [0.001] * 18  # to 20 ms
    yield from [0.005] * 16  # to 100 ms
    yield from [0.02] * 45  # to 1 s
    while True:
        yield 0.25


def _own_copy(transport: asyncio.BaseTransport | None) -> socket.socket | None:
    """A duplicate of the transport's TCP socket whose ``TCP_INFO`` reads, or None where it cannot be had."""
    if transport is None or sys.platform != "linux" or transport.get_extra_info("sslcontext") is not None:
        return None
    sock = transport.get_extra_info("socket")
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
        return None
    try:
        copy = socket.socket(fileno=os.dup(sock.fileno()))
    except OSError:
        return None
    try:
        _acked(copy)
        _queued(copy)
    except OSError:
        copy.close()
        return None
    return copy


def _info(sock: socket.socket) -> tuple[int, int]:
    """(``tcpi_state``, ``tcpi_bytes_acked``) from one read of the socket's ``TCP_INFO``."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_SIZE)
    if len(info) < _BYTES_ACKED + 8:
        raise OSError("TCP_INFO without tcpi_bytes_acked (Linux before 4.1)")
    return info[0], int(struct.unpack_from("=Q", info, _BYTES_ACKED)[0])


def _acked(sock: socket.socket) -> int:
    return _info(sock)[1]


def _queued(sock: socket.socket) -> int:
    """Bytes in the socket's send queue that the client has not acknowledged (sent or not)."""
    return int(struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0])


def _sent(sock: socket.socket) -> int:
    """Every byte handed to the kernel so far: acknowledged plus queued, both read at one moment.

    Only this process writes to the socket, so only acknowledgements move the two counters, and by the same amount
    in opposite directions; the queue read between two equal acknowledgement reads belongs with them. Each retry
    follows an acknowledgement of bytes still queued, so the loop ends.
    """
    acked = _acked(sock)
    while True:
        queued = _queued(sock)
        again = _acked(sock)
        if again == acked:
            return acked + queued
        acked = again


class Wire:
    """Positions in one connection's outgoing stream, and how far the client acknowledged it."""

    def __init__(self, transport: asyncio.Transport | None) -> None:
        self._transport = transport
        self._sock = _own_copy(transport)
        self._last_acked = 0
        self._marks = 0  # without TCP_INFO: positions are marks, received once the transport's buffer drained
        self._high = 0  # the highest position handed out
        self.aborted = False

    @property
    def exact(self) -> bool:
        """Whether positions are bytes the client's TCP acknowledged (else: bytes handed to the kernel)."""
        return self._sock is not None

    def _buffered(self) -> int:
        transport = self._transport
        if transport is None or transport.is_closing():
            return 0
        return transport.get_write_buffer_size()

    def closed(self) -> bool:
        return self._transport is None or self._transport.is_closing()

    def position(self) -> int:
        """The position just past every byte handed to the transport so far."""
        if self._sock is None:
            self._marks += 1
            return self._marks
        if self.closed():  # what the transport still holds is no longer known: nothing handed now counts received
            return self._last_acked + (1 << 62)
        buffered = self._buffered()
        try:
            position = _sent(self._sock) + buffered
        except OSError:
            return self._last_acked + (1 << 62)  # unreadable: nothing past this point is ever counted received
        self._high = max(self._high, position)
        return position

    def acked(self) -> int:
        """How far the client acknowledged (never goes back)."""
        if self._sock is None:
            if not self.closed() and self._buffered() == 0:
                self._last_acked = self._marks
            return self._last_acked
        with contextlib.suppress(OSError):
            state, acked = _info(self._sock)
            if state in _OPEN_STATES and not self.closed() and self._buffered() == 0 and _queued(self._sock) == 0:
                acked = max(acked, self._high)  # nothing written waits for the client: every position is received
            self._last_acked = max(self._last_acked, acked)
        return self._last_acked

    def outstanding(self) -> bool:
        """Whether bytes handed over wait for the client (so that no progress means a stall)."""
        if self._sock is None:
            return self._buffered() > 0
        try:
            return _queued(self._sock) + self._buffered() > 0
        except OSError:
            return False

    def abort(self) -> None:
        """End the connection at once with a reset: the client stopped reading."""
        self.aborted = True
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        if self._transport is not None:
            self._transport.abort()

    def close(self) -> None:
        """Give back the duplicate socket (the connection itself stays the transport's)."""
        if self._sock is not None:
            self.acked()
            self._sock.close()
            self._sock = None


# The least a reader must acknowledge per write deadline while bytes wait for it: a reader that takes a few bytes now
# and then (about 1 KiB/s at the default 60 s) would otherwise hold its delivery, and an archive slot, for days.
MIN_PROGRESS = 64 * 1024


class Keeper:
    """Runs beside one metered delivery on ``wire``: commits what the client acknowledged, renews ``ledger``'s
    reservations every ``renew_every`` seconds, and aborts the connection when the client acknowledged less than
    ``MIN_PROGRESS`` bytes in ``write_timeout`` seconds while bytes waited for it (the write deadline). ``finish``
    waits for the last acknowledgement and settles the ledger."""

    def __init__(self, wire: Wire, ledger: Ledger, *, write_timeout: float, renew_every: float) -> None:
        self.wire, self.ledger = wire, ledger
        self.write_timeout, self.renew_every = write_timeout, renew_every
        self.tick = min(1.0, write_timeout / 4, renew_every)
        self._poked = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.stalled = asyncio.Event()

    async def __aenter__(self) -> Keeper:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        # Whatever ended the delivery, its reservations are settled now: by what the client acknowledged.
        await asyncio.shield(self._close())

    async def _close(self) -> None:
        try:
            await self.ledger.close(self.wire.acked())
        finally:
            self.wire.close()

    def poke(self) -> None:
        """Something was handed over: look at the acknowledgements now rather than at the next tick."""
        self._poked.set()

    async def _run(self) -> None:
        while True:
            try:
                await self._watch()
            except Exception:  # a fault here must not leave the delivery without its deadline: log, go on watching
                log.exception("the keeper of a delivery failed; it starts again")
                await asyncio.sleep(self.tick)

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        last = self.wire.acked()
        since = renewed = loop.time()
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.tick):
                    await self._poked.wait()
            self._poked.clear()
            acked = self.wire.acked()
            await self.ledger.acknowledge(acked)
            now = loop.time()
            if acked - last >= MIN_PROGRESS or not self.wire.outstanding():
                last, since = acked, now
            elif now - since >= self.write_timeout and not self.wire.closed():
                log.info("client acknowledged %d bytes in %.0f s: connection closed", acked - last, now - since)
                self.stalled.set()
                self.wire.abort()
            if now - renewed >= self.renew_every:
                renewed = now
                await self.ledger.renew()

    async def finish(self) -> None:
        """Wait until the client acknowledged everything handed over, hung up, or stalled past the deadline."""
        waits = _waits()
        while True:
            target = self.ledger.last_position
            if target is None:
                return
            acked = self.wire.acked()
            if acked >= target:
                await self.ledger.acknowledge(acked)
                continue
            if self.wire.closed():
                return
            await asyncio.sleep(next(waits))
