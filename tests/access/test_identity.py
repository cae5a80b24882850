"""Who is calling: client addresses behind proxies, IPv6 per /64, session tokens, crawler verification."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from imagesvc.access.identity import (
    CrawlerVerifier,
    SystemResolver,
    client_address,
    in_networks,
    sign_session,
    subject_for_address,
    verify_session,
)
from imagesvc.errors import Unauthorized


@pytest.mark.parametrize(
    ("peer", "xff", "trusted", "expected"),
    [
        ("203.0.113.5", "198.51.100.1", (), "203.0.113.5"),  # no trusted proxy: the header is ignored
        ("10.0.0.2", "198.51.100.1", ("10.0.0.0/8",), "198.51.100.1"),
        ("10.0.0.2", "1.2.3.4, 198.51.100.1, 10.0.0.3", ("10.0.0.0/8",), "198.51.100.1"),  # spoofed left part skipped
        ("10.0.0.2", "garbage, 10.0.0.9", ("10.0.0.0/8",), "10.0.0.9"),  # garbage counts as the hop that sent it
        ("10.0.0.2", "garbage", ("10.0.0.0/8",), "10.0.0.2"),
        ("10.0.0.2", "198.51.100.1:4711", ("10.0.0.0/8",), "10.0.0.2"),  # address with a port: not an address
        ("10.0.0.2", None, ("10.0.0.0/8",), "10.0.0.2"),
        ("10.0.0.2", "2001:DB8:0:0::1", ("10.0.0.0/8",), "2001:db8::1"),  # canonical spelling
        # several lines are one list, in order: the client's own first line cannot pick the address
        ("10.0.0.2", ["203.0.113.66", "198.51.100.1"], ("10.0.0.0/8",), "198.51.100.1"),
        ("10.0.0.2", ["198.51.100.1", "10.0.0.7"], ("10.0.0.0/8",), "198.51.100.1"),
        ("10.0.0.2", ["", " , "], ("10.0.0.0/8",), "10.0.0.2"),
        ("not-an-ip", "198.51.100.1", ("10.0.0.0/8",), "0.0.0.0"),
        # a dual-stack socket reports an IPv4 proxy as ::ffff:a.b.c.d: the same host, so the same networks match it
        ("::ffff:10.0.0.2", "198.51.100.1", ("10.0.0.0/8",), "198.51.100.1"),
        ("10.0.0.2", "198.51.100.1, ::ffff:10.0.0.3", ("10.0.0.0/8",), "198.51.100.1"),
    ],
)
def test_client_address(peer: str, xff: str | list[str] | None, trusted: tuple[str, ...], expected: str) -> None:
    assert client_address(peer, xff, trusted) == expected


@pytest.mark.parametrize(
    ("address", "expected"),
    [("192.0.2.9", True), ("::ffff:192.0.2.9", True), ("2001:db8::9", True), ("198.51.100.1", False), ("x", False)],
)
def test_one_network_match_for_proxies_and_assistants(address: str, expected: bool) -> None:
    """Trusted proxies and assistant networks are matched by one rule: an address trusted as a proxy is in the
    network for an assistant check too, whichever way the socket spelled it."""
    networks = ("192.0.2.0/24", "2001:db8::/32")
    assert in_networks(address, networks) is expected
    assert (client_address(address, "203.0.113.7", networks) == "203.0.113.7") is expected


def test_ipv6_is_counted_per_64_and_mapped_ipv4_as_ipv4() -> None:
    a = subject_for_address("2001:db8:1:2::1")
    b = subject_for_address("2001:db8:1:2:ffff::9")
    c = subject_for_address("2001:db8:1:3::1")
    assert a == b == "ip6:2001:db8:1:2::/64"
    assert c != a
    assert subject_for_address("::ffff:192.0.2.7") == "ip:192.0.2.7"
    assert subject_for_address("192.0.2.7") == "ip:192.0.2.7"


def test_session_tokens_round_trip_and_fail_closed() -> None:
    token = sign_session("42", int(time.time()) + 60, "s3cret")
    assert token.startswith("sess.v1.42.")
    assert verify_session(token, "s3cret") == "42"
    with pytest.raises(Unauthorized, match="signature"):
        verify_session(token, "other")
    with pytest.raises(Unauthorized, match="expired"):
        verify_session(sign_session("42", int(time.time()) - 1, "s3cret"), "s3cret")
    with pytest.raises(Unauthorized, match="no session tokens"):
        verify_session(token, "")
    tampered = token.replace("sess.v1.42.", "sess.v1.43.")
    with pytest.raises(Unauthorized):
        verify_session(tampered, "s3cret")


def test_a_session_token_has_one_spelling() -> None:
    """Other spellings of the same expiry used to verify under the same signature; only the signed bytes do now."""
    expires = int(time.time()) + 600
    token = sign_session("42", expires, "s3cret")
    prefix, signature = token.rsplit(".", 1)
    head = prefix.removesuffix(str(expires))
    arabic_indic = str(expires).translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"))
    for spelling in (
        f"+{expires}",
        f"000{expires}",
        f"{str(expires)[:3]}_{str(expires)[3:]}",
        arabic_indic,
        f" {expires}",
    ):
        with pytest.raises(Unauthorized):
            verify_session(f"{head}{spelling}.{signature}", "s3cret")
    for broken in ("sess.v1..9999999999.x", "sess.v1.", "sess.v1.42", "sess.v1.42.9999999999.", "sess.v1.42.x.y.z"):
        with pytest.raises(Unauthorized):
            verify_session(broken, "s3cret")
    for user in ("", "a.b", "ü", "a b"):
        with pytest.raises(ValueError):
            sign_session(user, expires, "s3cret")


class Resolver:
    def __init__(self, ptr: dict[str, list[str]], a: dict[str, list[str]]) -> None:
        self.ptr, self.a = ptr, a

    async def reverse(self, address: str) -> list[str]:
        return self.ptr.get(address, [])

    async def forward(self, hostname: str) -> list[str]:
        return self.a.get(hostname, [])


async def test_crawler_needs_forward_confirmed_reverse_dns() -> None:
    resolver = Resolver(
        ptr={"1.1.1.1": ["a.googlebot.com"], "2.2.2.2": ["a.googlebot.com"], "3.3.3.3": ["googlebot.com.evil.example"]},
        a={"a.googlebot.com": ["1.1.1.1"], "googlebot.com.evil.example": ["3.3.3.3"]},
    )
    verifier = CrawlerVerifier(["googlebot.com"], resolver)
    assert await verifier.verify("1.1.1.1")
    assert not await verifier.verify("2.2.2.2")  # the name does not resolve back to this address
    assert not await verifier.verify("3.3.3.3")  # the name is not under the domain
    assert not await verifier.verify("4.4.4.4")  # no PTR at all


async def test_reverse_dns_against_a_silent_name_server_gives_up_in_time() -> None:
    """A name server that never answers (a real UDP socket that reads and drops every query) costs a crawler check
    at most the resolver's timeout, not the system resolver's retries on a thread."""
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))
    try:
        resolver = SystemResolver(timeout=0.3, nameservers=[f"127.0.0.1:{silent.getsockname()[1]}"])
        started = time.monotonic()
        assert await resolver.reverse("66.249.66.1") == []
        assert await resolver.forward("crawl-66-249-66-1.googlebot.com") == []
        assert time.monotonic() - started < 2.0
        assert silent.recv(512)  # the queries did go out
        resolver.close()  # the given-up queries end now, while this test's loop still runs
    finally:
        silent.close()


class SlowResolver(Resolver):
    """Answers like ``Resolver`` after ``delay`` seconds, counting the reverse look-ups."""

    def __init__(self, delay: float, ptr: dict[str, list[str]], a: dict[str, list[str]]) -> None:
        super().__init__(ptr, a)
        self.delay, self.lookups = delay, 0

    async def reverse(self, address: str) -> list[str]:
        self.lookups += 1
        await asyncio.sleep(self.delay)
        return await super().reverse(address)


async def test_crawler_verification_is_bounded_in_time_and_in_memory() -> None:
    slow = SlowResolver(30, {"1.1.1.1": ["a.googlebot.com"]}, {"a.googlebot.com": ["1.1.1.1"]})
    verifier = CrawlerVerifier(["googlebot.com"], slow, timeout=0.2)
    started = time.monotonic()
    assert not await verifier.verify("1.1.1.1")  # too slow to confirm: not a verified crawler
    assert time.monotonic() - started < 1.0
    quick = SlowResolver(0, {}, {})
    verifier = CrawlerVerifier(["googlebot.com"], quick, max_entries=3)
    for n in range(5):
        await verifier.verify(f"10.0.0.{n}")
    await verifier.verify("10.0.0.4")  # remembered
    assert quick.lookups == 5
    await verifier.verify("10.0.0.0")  # forgotten: only the 3 most recent verdicts are kept
    assert quick.lookups == 6
