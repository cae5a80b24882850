"""Properties of the identity parsers, over generated input: session tokens, bearer headers, forwarded-for hops."""

from __future__ import annotations

import ipaddress
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict

from imagesvc.access.identity import bearer, client_address, sign_session, verify_session
from imagesvc.errors import Unauthorized

SECRET = "s3cret"
FEW = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
USERS = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:@+-", min_size=1, max_size=40)
FUTURE = st.integers(min_value=int(time.time()) + 3600, max_value=10**11)


@FEW
@given(user=USERS, expires=FUTURE)
def test_a_signed_token_round_trips(user: str, expires: int) -> None:
    assert verify_session(sign_session(user, expires, SECRET), SECRET) == user


@FEW
@given(user=USERS, expires=FUTURE, data=st.data())
def test_any_change_to_a_signed_token_fails(user: str, expires: int, data: st.DataObject) -> None:
    """Flip, drop or insert any byte (or character, ASCII or not) anywhere: the token no longer verifies."""
    token = sign_session(user, expires, SECRET)
    at = data.draw(st.integers(min_value=0, max_value=len(token)), label="at")
    how = data.draw(st.sampled_from(["replace", "delete", "insert"]), label="how")
    char = data.draw(st.characters(codec="utf-8") | st.sampled_from("+-_0٠. "), label="char")
    if how == "replace" and at < len(token):
        mutated = token[:at] + char + token[at + 1 :]
    elif how == "delete" and at < len(token):
        mutated = token[:at] + token[at + 1 :]
    else:
        mutated = token[:at] + char + token[at:]
    if mutated == token:
        return
    with pytest.raises(Unauthorized):
        verify_session(mutated, SECRET)


@FEW
@given(token=st.text(max_size=80) | st.text(max_size=80).map(lambda t: "sess.v1." + t))
def test_any_token_text_is_a_user_or_unauthorized(token: str) -> None:
    try:
        user = verify_session(token, SECRET)
    except Unauthorized:
        return
    assert sign_session(user, int(token.rsplit(".", 2)[1]), SECRET) == token  # only the signed spelling verifies


@FEW
@given(values=st.lists(st.text(max_size=60) | st.just("Bearer ") | st.just("bearer  isk_x"), max_size=3))
def test_authorization_headers_give_a_credential_none_or_401(values: list[str]) -> None:
    headers = CIMultiDict(("Authorization", value) for value in values)
    try:
        credential = bearer(headers)
    except Unauthorized:
        assert values
        return
    if not values:
        assert credential is None
    else:
        assert len(values) == 1 and credential and " " not in credential
        assert values[0].strip(" ").lower().startswith("bearer ") and values[0].rstrip(" ").endswith(credential)


ADDRESSES = st.ip_addresses().map(str)
HOPS = st.lists(ADDRESSES | st.text(max_size=12) | st.sampled_from(["10.0.0.5", "unknown", "[::1]:80"]), max_size=6)
TRUSTED = ("10.0.0.0/8", "fd00::/8")


def _trusted(hop: str) -> bool:
    try:
        ip = ipaddress.ip_address(hop)
    except ValueError:
        return False
    return any(ip in ipaddress.ip_network(n) for n in TRUSTED)


@FEW
@given(peer=ADDRESSES | st.sampled_from(["10.0.0.2", "fd00::2"]), lines=st.lists(HOPS, max_size=3))
def test_the_caller_is_the_rightmost_untrusted_hop(peer: str, lines: list[list[str]]) -> None:
    """Whatever the lines say: a model walk over all hops, joined in order, gives the address; nothing raises."""
    header_lines = [", ".join(hops) for hops in lines]
    got = client_address(peer, header_lines, TRUSTED)
    expected = str(ipaddress.ip_address(peer))
    if _trusted(peer):
        hops = [h.strip() for line in header_lines for h in line.split(",") if h.strip()]
        for hop in reversed(hops):
            try:
                expected = str(ipaddress.ip_address(hop))
            except ValueError:
                break
            if not _trusted(hop):
                break
    assert got == expected
    ipaddress.ip_address(got)  # always an address: garbage never becomes a caller of its own


@FEW
@given(client_lines=st.lists(HOPS, max_size=3), client=ADDRESSES, proxies=st.lists(st.just("10.0.0.9"), max_size=2))
def test_nothing_a_client_writes_changes_who_it_is(
    client_lines: list[list[str]], client: str, proxies: list[str]
) -> None:
    """A client controls every line and hop left of what its trusted proxies append; none of it changes the answer."""
    if _trusted(client):
        return
    appended = ", ".join([client, *proxies])
    got = client_address("10.0.0.2", [*(", ".join(hops) for hops in client_lines), appended], TRUSTED)
    assert got == str(ipaddress.ip_address(client))
