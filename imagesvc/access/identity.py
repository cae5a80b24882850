"""Who is calling: an API key, a signed-in session, a verified crawler or assistant fetch, or an address.

Identity is always an upgrade, never a silent downgrade: a presented key or session token that does not verify is a
401, not an anonymous request. A User-Agent alone never exempts anyone: crawlers must pass forward-confirmed reverse
DNS and assistant fetches must come from an operator-configured network.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from imagesvc.access.policy import CallerClass, caller_class
from imagesvc.access.sessions import SESSION_PREFIX, sign_session, verify_session
from imagesvc.catalog import Catalog
from imagesvc.catalog.api_keys import lookup_key
from imagesvc.errors import Unauthorized
from imagesvc.settings import Settings

__all__ = [
    "Caller",
    "CrawlerVerifier",
    "Identifier",
    "Resolver",
    "SystemResolver",
    "client_address",
    "in_networks",
    "sign_session",
    "subject_for_address",
    "verify_session",
]


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


def client_address(peer: str | None, forwarded_for: str | Sequence[str] | None, trusted: Sequence[str]) -> str:
    """The client's address: ``X-Forwarded-For`` is believed only hop by hop from trusted proxies.

    Every ``X-Forwarded-For`` line counts, joined in order (a second line is no way to pick an address). Walking the
    hops from the right, each one that is itself a trusted proxy is skipped; the first untrusted one is the client. A
    hop that is not an IP address stops the walk: the request counts as the last trusted hop that vouched for it, so
    garbage never becomes a caller of its own. A request that does not come from a trusted proxy is judged by its
    socket peer alone. Never raises.
    """
    address = _canonical(peer) or "0.0.0.0"
    if not forwarded_for or not trusted or not in_networks(address, trusted):
        return address
    lines = [forwarded_for] if isinstance(forwarded_for, str) else list(forwarded_for)
    hops = [hop.strip() for line in lines for hop in line.split(",")]
    for hop in reversed([h for h in hops if h]):
        ip = _canonical(hop)
        if ip is None:
            break  # not an address: stay with the trusted hop that reported it
        address = ip
        if not in_networks(ip, trusted):
            break
    return address


def _canonical(value: str | None) -> str | None:
    """``value`` as a canonical IP address, or None when it is not one."""
    if not value:
        return None
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return None


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


# -- crawlers --------------------------------------------------------------------------------------------------------


class Resolver(Protocol):
    async def reverse(self, address: str) -> list[str]: ...

    async def forward(self, hostname: str) -> list[str]: ...


class SystemResolver:
    """DNS through aiodns (c-ares, asynchronous, on the event loop: no thread waits on a slow name server), each
    look-up bounded by ``timeout`` seconds; a failure or a timeout is an empty answer."""

    def __init__(self, timeout: float = 2.0, nameservers: Sequence[str] | None = None) -> None:
        self.timeout, self.nameservers = timeout, list(nameservers) if nameservers else None
        self._resolvers: dict[int, Any] = {}

    def _resolver(self) -> Any:
        import aiodns

        loop = asyncio.get_running_loop()
        resolver = self._resolvers.get(id(loop))
        if resolver is None:  # a c-ares channel belongs to the loop it was made on
            resolver = self._resolvers[id(loop)] = aiodns.DNSResolver(self.nameservers, timeout=self.timeout, tries=1)
        return resolver

    def close(self) -> None:
        """Cancel the look-ups still pending on the running loop's channel, so that their callbacks land now and
        not after the loop has closed (a look-up given up at ``timeout`` can still be in flight in c-ares)."""
        resolver = self._resolvers.pop(id(asyncio.get_running_loop()), None)
        if resolver is not None:
            resolver.cancel()

    async def reverse(self, address: str) -> list[str]:
        import aiodns

        try:
            async with asyncio.timeout(self.timeout):
                found = await self._resolver().gethostbyaddr(address)
        except (aiodns.error.DNSError, TimeoutError, OSError, ValueError):
            return []
        return [found.name, *found.aliases]

    async def forward(self, hostname: str) -> list[str]:
        import aiodns

        try:
            async with asyncio.timeout(self.timeout):
                found = await self._resolver().getaddrinfo(hostname)
        except (aiodns.error.DNSError, TimeoutError, OSError, ValueError):
            return []
        return sorted({_text(node.addr[0]) for node in found.nodes})


def _text(address: bytes | str) -> str:
    return address.decode() if isinstance(address, bytes) else address


class CrawlerVerifier:
    """Forward-confirmed reverse DNS: the address's name ends in a configured domain and resolves back to it.

    Verification runs before the request limit, so it is bounded: one verdict takes at most ``timeout`` seconds
    (slower is "not verified", remembered for ``retry`` seconds), and at most ``max_entries`` verdicts are kept (the
    least recently used go first), so a flood from many addresses costs neither unbounded waits nor memory."""

    def __init__(
        self,
        domains: Sequence[str],
        resolver: Resolver,
        ttl: float = 3600.0,
        *,
        timeout: float = 3.0,
        retry: float = 60.0,
        max_entries: int = 10_000,
    ) -> None:
        self.domains = tuple(d.lower().lstrip(".") for d in domains)
        self.resolver = resolver
        self.ttl, self.timeout, self.retry, self.max_entries = ttl, timeout, retry, max_entries
        self._cache: OrderedDict[str, tuple[float, bool]] = OrderedDict()

    def _domain_ok(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return any(host == d or host.endswith("." + d) for d in self.domains)

    async def verify(self, address: str) -> bool:
        cached = self._cache.get(address)
        if cached is not None and cached[0] > time.monotonic():
            self._cache.move_to_end(address)
            return cached[1]
        verdict, ttl = False, self.ttl
        try:
            async with asyncio.timeout(self.timeout):
                for host in await self.resolver.reverse(address):
                    if self._domain_ok(host) and address in await self.resolver.forward(host):
                        verdict = True
                        break
        except TimeoutError:
            ttl = self.retry
        self._cache[address] = (time.monotonic() + ttl, verdict)
        self._cache.move_to_end(address)
        while len(self._cache) > self.max_entries:
            self._cache.popitem(last=False)
        return verdict


def agent_matches(user_agent: str, tokens: Sequence[str]) -> bool:
    lowered = user_agent.lower()
    return any(token.lower() in lowered for token in tokens)


def in_networks(address: str, networks: Sequence[str]) -> bool:
    """Whether ``address`` lies in one of ``networks`` (settings text): the one match for trusted proxies and assistant
    networks. An IPv4-mapped IPv6 address (``::ffff:a.b.c.d``, as a dual-stack socket reports IPv4 peers) is matched as
    its IPv4 address. Never raises: an address that does not parse is in no network."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in network for network in _parsed_networks(tuple(networks)))


@functools.lru_cache(maxsize=32)
def _parsed_networks(networks: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """Settings hold networks as text; parsing them once, not on every request, is most of what a check costs."""
    return tuple(ipaddress.ip_network(n, strict=False) for n in networks)


def bearer(headers: Mapping[str, str]) -> str | None:
    """The credential of ``Authorization: Bearer <credential>``; None when no Authorization header was sent.

    The scheme is case-insensitive and a run of spaces (only spaces) separates it from the credential (RFC 6750).
    Anything else that was presented (another scheme, no credential, two credentials, two Authorization headers) is a
    401: identity is never silently dropped.
    """
    values = _all(headers, "Authorization")
    if not values:
        return None
    recovery = ["Send the key as 'Authorization: Bearer <key>', or send no Authorization header to be anonymous."]
    if len(values) > 1:
        raise Unauthorized("Send one Authorization header, not several.", recovery=recovery)
    parts = [part for part in values[0].split(" ") if part]  # spaces only: no tab or other white space
    if not parts or parts[0].lower() != "bearer":
        raise Unauthorized("Only 'Authorization: Bearer <key>' is understood.", recovery=recovery)
    if len(parts) != 2:
        raise Unauthorized("'Authorization: Bearer' must be followed by exactly one key or token.", recovery=recovery)
    return parts[1]


class Identifier:
    """Turns request headers and the socket peer into a ``Caller``: key > session > crawler/assistant > address."""

    def __init__(self, settings: Settings, catalog: Catalog | Callable[[], Catalog], verifier: CrawlerVerifier) -> None:
        self.settings = settings
        self._catalog = catalog  # or a function naming the catalog of the moment (a node following snapshots)
        self.verifier = verifier

    @property
    def catalog(self) -> Catalog:
        return self._catalog() if callable(self._catalog) else self._catalog

    async def identify(self, headers: Mapping[str, str], peer: str | None, cookies: Mapping[str, str]) -> Caller:
        s = self.settings
        credential = bearer(headers)
        if credential is not None and not credential.startswith(SESSION_PREFIX):
            catalog = self.catalog
            record = await catalog.gate.run(lookup_key, catalog, credential)  # off the loop, under the deadline
            recovery = ["Check the key, ask for a new one, or send no Authorization header to be served anonymously."]
            if record is None:
                raise Unauthorized("The API key is not known to this service.", recovery=recovery)
            state = record.state()
            if state != "active":
                raise Unauthorized(
                    f"The API key {record.id} is {state}.", recovery=recovery, details={"key": record.id}
                )
            return Caller("key", f"key:{record.id}", f"key:{record.tier}", key_ref=record.id)
        token = credential if credential is not None else cookies.get("imagesvc_session")
        if token:
            user_id = verify_session(token, s.session_secret)
            return Caller("signed_in", f"user:{user_id}", "signed_in")
        address = client_address(peer, _all(headers, "X-Forwarded-For"), s.trusted_proxies)
        agent = headers.get("User-Agent", "")
        if agent and agent_matches(agent, s.assistant_agents) and in_networks(address, s.assistant_networks):
            return Caller("assistant", f"assistant:{address}", "assistant")
        if agent and agent_matches(agent, s.crawler_agents) and await self.verifier.verify(address):
            return Caller("crawler", f"crawler:{address}", "crawler")
        return Caller("anonymous", subject_for_address(address), "anonymous")


def _all(headers: Mapping[str, str], name: str) -> list[str]:
    """Every line of header ``name``, in order."""
    if hasattr(headers, "getall"):
        return list(headers.getall(name, []))
    value = headers.get(name)
    return [] if value is None else [value]
