"""Stream positions of a metered delivery on a real loopback connection: a position is exact even when the client's
acknowledgements land while it is being read, so the wait for the last acknowledgement ends (a kept-alive client's
next request waits for that wait).

The moment an acknowledgement lands between the two counters a position adds up is made deterministic: the reading
of the send queue is wrapped so that, right after it, the client reads everything and its TCP acknowledges it.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from imagesvc.access.ledger import Ledger
from imagesvc.web import wire as wire_module
from imagesvc.web.wire import Keeper, Wire

SENT = 200_000  # bytes handed to the transport: more than the kernel sends at once to a reader that has not read
HANG = 30  # seconds: a bound only a hang exceeds


class _Held(asyncio.Protocol):
    def __init__(self, made: asyncio.Future[asyncio.Transport]) -> None:
        self.made = made

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.made.set_result(transport)  # type: ignore[arg-type]


@pytest.fixture
async def connection() -> AsyncIterator[tuple[asyncio.Transport, socket.socket]]:
    """A server-side transport and the client's blocking socket of one loopback TCP connection."""
    loop = asyncio.get_running_loop()
    made: asyncio.Future[asyncio.Transport] = loop.create_future()
    server = await loop.create_server(lambda: _Held(made), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # takes a few kilobytes, then stops acknowledging
    await loop.sock_connect(client, ("127.0.0.1", port))
    transport = await asyncio.wait_for(made, HANG)
    try:
        yield transport, client
    finally:
        transport.abort()
        client.close()
        server.close()


def _ack_while_queued_is_read(monkeypatch: pytest.MonkeyPatch, client: socket.socket, wire: Wire) -> None:
    """Right after the send queue is read, the client reads every byte and its TCP acknowledges them."""
    real = wire_module._queued

    def queued_then_acknowledged(sock: socket.socket) -> int:
        value = real(sock)
        monkeypatch.setattr(wire_module, "_queued", real)  # once
        got = 0
        client.settimeout(HANG)
        while got < SENT:
            got += len(client.recv(1 << 16))
        deadline = asyncio.get_running_loop().time() + HANG
        while wire_module._acked(sock) < SENT:  # the acknowledgement of the last bytes has landed
            assert asyncio.get_running_loop().time() < deadline, "the client's TCP never acknowledged"
        return value

    monkeypatch.setattr(wire_module, "_queued", queued_then_acknowledged)


def _hand_over(transport: asyncio.Transport) -> Wire:
    wire = Wire(transport)
    assert wire.exact, "this system reads no TCP_INFO: positions are not acknowledgements here"
    transport.write(b"x" * SENT)
    assert wire.outstanding()  # the client has not read: bytes wait in the kernel
    return wire


async def test_a_position_read_while_acknowledgements_land_is_exact(
    connection: tuple[asyncio.Transport, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    transport, client = connection
    wire = _hand_over(transport)
    _ack_while_queued_is_read(monkeypatch, client, wire)
    assert wire.position() == SENT
    wire.close()


class _Unit:
    """A meter's settlement, recorded (the ledger settles whatever it was handed)."""

    def __init__(self) -> None:
        self.settled: list[bool] = []

    async def settle(self, received: bool) -> None:
        self.settled.append(received)


async def test_the_wait_for_the_last_acknowledgement_ends(
    connection: tuple[asyncio.Transport, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    transport, client = connection
    wire = _hand_over(transport)
    ledger = Ledger()
    unit: Any = _Unit()
    _ack_while_queued_is_read(monkeypatch, client, wire)
    ledger.hand(unit, wire.position())
    keeper = Keeper(wire, ledger, write_timeout=HANG * 2, renew_every=HANG * 2)
    async with keeper:
        await asyncio.wait_for(keeper.finish(), HANG)  # before: waited until the client closed the connection
    assert unit.settled == [True]
