"""Who is calling: an API key, a signed-in session, a verified crawler or assistant fetch, or an address.

Identity is always an upgrade, never a silent downgrade: a presented key or session token that does not verify is a
401, not an anonymous request. A User-Agent alone never exempts anyone: crawlers must pass forward-confirmed reverse
DNS and assistant fetches must come from an operator-configured network.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import hmac
import ipaddress
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from imagesvc.access.policy import CallerClass, caller_class
from imagesvc.catalog import Catalog
from imagesvc.catalog.keys import lookup_key
from imagesvc.errors import Unauthorized
from imagesvc.settings import Settings

__all__ = [
    "Caller",
    "CrawlerVerifier",
    "Identifier",
    "Resolver",
    "SystemResolver",
    "client_address",
    "sign_session",
    "subject_for_address",
    "verify_session",
]

SESSION_PREFIX = "sess.v1."


@dataclass(frozen=True)
class Caller:
    """The identified caller: its kind, the subject it is counted under, and its policy class."""

    kind: str  # "anonymous" | "signed_in" | "key" | "crawler" | "assistant"
    subject: str  # e.g. "ip:203.0.113.7", "ip6:2001:db8:1:2::/64", "user:42", "key:3f9a2c7d"
    policy: str  # a class name of access.policy: "anonymous", "signed_in", "key:free", "key:full", "crawler", ...
    key_ref: str | None = None  # the key's public reference, never its secret

    @property
    def allowance(self) -> CallerClass:
        return caller_class(self.policy)


# -- addresses -----------------------------------------------------------------------------------------------------


def client_address(peer: str | None, forwarded_for: str | None, trusted: Sequence[str]) -> str:
    """The client's address: ``X-Forwarded-For`` is believed only hop by hop from trusted proxies.

    Walking the list from the right, each address that is itself a trusted proxy is skipped; the first untrusted one
    is the client. A request that does not come from a trusted proxy is judged by its socket peer alone.
    """
    networks = [ipaddress.ip_network(t, strict=False) for t in trusted]

    def is_trusted(addr: str) -> bool:
        try:
            ip = ipaddress.ip_address(addr)
        except ValueError:
            return False
        return any(ip in net for net in networks)

    address = peer or "0.0.0.0"
    if not forwarded_for or not is_trusted(address):
        return address
    for hop in reversed([h.strip() for h in forwarded_for.split(",") if h.strip()]):
        address = hop
        if not is_trusted(hop):
            break
    return address


def subject_for_address(address: str) -> str:
    """IPv4 counts per address; IPv6 per /64, the block one subscriber usually holds."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return f"ip:{address}"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return f"ip:{ip.ipv4_mapped}"
        return f"ip6:{ipaddress.ip_network(f'{ip}/64', strict=False)}"
    return f"ip:{ip}"


# -- signed-in sessions ----------------------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def sign_session(user_id: str, expires_at: int, secret: str) -> str:
    """``sess.v1.<user_id>.<expires unix seconds>.<base64url HMAC-SHA256 of "v1.<user_id>.<expires>">``."""
    if not user_id or "." in user_id:
        raise ValueError("user_id must be non-empty and contain no '.'")
    message = f"v1.{user_id}.{expires_at}".encode()
    return f"{SESSION_PREFIX}{user_id}.{expires_at}.{_b64(hmac.new(secret.encode(), message, hashlib.sha256).digest())}"


def verify_session(token: str, secret: str, now: float | None = None) -> str:
    """The user id of a valid, unexpired session token; ``Unauthorized`` otherwise."""
    recovery = ["Sign in again on the site, or send no session token to be served anonymously."]
    if not secret:
        raise Unauthorized("This service accepts no session tokens (none is configured).", recovery=recovery)
    try:
        user_id, expires_raw, signature = token.removeprefix(SESSION_PREFIX).split(".")
        expires_at = int(expires_raw)
    except ValueError:
        raise Unauthorized("The session token is malformed.", recovery=recovery) from None
    expected = sign_session(user_id, expires_at, secret).rsplit(".", 1)[1]
    if not hmac.compare_digest(expected, signature):
        raise Unauthorized("The session token's signature does not verify.", recovery=recovery)
    if expires_at <= (now if now is not None else time.time()):
        raise Unauthorized("The session token has expired.", recovery=recovery)
    return user_id


# -- crawlers --------------------------------------------------------------------------------------------------------


class Resolver(Protocol):
    async def reverse(self, address: str) -> list[str]: ...

    async def forward(self, hostname: str) -> list[str]: ...


class SystemResolver:
    """DNS through the system resolver, off the event loop."""

    async def reverse(self, address: str) -> list[str]:
        try:
            host, aliases, _ = await asyncio.to_thread(socket.gethostbyaddr, address)
        except OSError:
            return []
        return [host, *aliases]

    async def forward(self, hostname: str) -> list[str]:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(hostname, None)
        except OSError:
            return []
        return sorted({str(info[4][0]) for info in infos})


class CrawlerVerifier:
    """Forward-confirmed reverse DNS: the address's name ends in a configured domain and resolves back to it."""

    def __init__(self, domains: Sequence[str], resolver: Resolver, ttl: float = 3600.0) -> None:
        self.domains = tuple(d.lower().lstrip(".") for d in domains)
        self.resolver = resolver
        self.ttl = ttl
        self._cache: dict[str, tuple[float, bool]] = {}

    def _domain_ok(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return any(host == d or host.endswith("." + d) for d in self.domains)

    async def verify(self, address: str) -> bool:
        cached = self._cache.get(address)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        verdict = False
        for host in await self.resolver.reverse(address):
            if self._domain_ok(host) and address in await self.resolver.forward(host):
                verdict = True
                break
        self._cache[address] = (time.monotonic() + self.ttl, verdict)
        return verdict


def agent_matches(user_agent: str, tokens: Sequence[str]) -> bool:
    lowered = user_agent.lower()
    return any(token.lower() in lowered for token in tokens)


def in_networks(address: str, networks: Sequence[str]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in _parsed_networks(tuple(networks)))


@functools.lru_cache(maxsize=32)
def _parsed_networks(networks: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """Settings hold networks as text; parsing them once, not on every request, is most of what a check costs."""
    return tuple(ipaddress.ip_network(n, strict=False) for n in networks)


def bearer(headers: Mapping[str, str]) -> str | None:
    value = headers.get("Authorization", "")
    scheme, _, credential = value.partition(" ")
    if scheme.lower() != "bearer":
        if value:
            raise Unauthorized(
                "Only 'Authorization: Bearer <key>' is understood.",
                recovery=["Send the key as 'Authorization: Bearer <key>'."],
            )
        return None
    return credential.strip() or None


class Identifier:
    """Turns request headers and the socket peer into a ``Caller``: key > session > crawler/assistant > address."""

    def __init__(self, settings: Settings, catalog: Catalog, verifier: CrawlerVerifier) -> None:
        self.settings = settings
        self.catalog = catalog
        self.verifier = verifier

    async def identify(self, headers: Mapping[str, str], peer: str | None, cookies: Mapping[str, str]) -> Caller:
        s = self.settings
        credential = bearer(headers)
        if credential is not None and not credential.startswith(SESSION_PREFIX):
            record = lookup_key(self.catalog, credential)
            recovery = ["Check the key, ask for a new one, or send no Authorization header to be served anonymously."]
            if record is None:
                raise Unauthorized("The API key is not known to this service.", recovery=recovery)
            state = record.state()
            if state != "active":
                raise Unauthorized(
                    f"The API key {record.id} is {state}.", recovery=recovery, details={"key": record.id}
                )
            return Caller("key", f"key:{record.id}", f"key:{record.tier}", key_ref=record.id)
        token = credential or cookies.get("imagesvc_session")
        if token:
            user_id = verify_session(token, s.session_secret)
            return Caller("signed_in", f"user:{user_id}", "signed_in")
        address = client_address(peer, headers.get("X-Forwarded-For"), s.trusted_proxies)
        agent = headers.get("User-Agent", "")
        if agent and agent_matches(agent, s.assistant_agents) and in_networks(address, s.assistant_networks):
            return Caller("assistant", f"assistant:{address}", "assistant")
        if agent and agent_matches(agent, s.crawler_agents) and await self.verifier.verify(address):
            return Caller("crawler", f"crawler:{address}", "crawler")
        return Caller("anonymous", subject_for_address(address), "anonymous")
