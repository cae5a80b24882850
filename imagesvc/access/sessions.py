"""Signed-in sessions: ``sess.v1.<user_id>.<expires>.<signature>`` tokens, signed with the site's secret.

One signed token has exactly one spelling: verification checks the HMAC over the exact bytes received, in constant
time, before it parses anything, and then reads each part strictly.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time

from imagesvc.errors import Unauthorized

__all__ = ["SESSION_PREFIX", "sign_session", "verify_session"]

SESSION_PREFIX = "sess.v1."


def _signature(message: bytes, secret: str) -> bytes:
    return base64.urlsafe_b64encode(hmac.new(secret.encode(), message, hashlib.sha256).digest()).rstrip(b"=")


_USER_ID = re.compile(rb"[A-Za-z0-9_:@+-]{1,128}")  # what sign_session accepts: no '.', no spaces, ASCII
_EXPIRES = re.compile(rb"[1-9][0-9]{0,11}")  # Unix seconds: ASCII digits, no sign, no leading zero


def sign_session(user_id: str, expires_at: int, secret: str) -> str:
    """``sess.v1.<user_id>.<expires unix seconds>.<base64url HMAC-SHA256 of "v1.<user_id>.<expires>">``."""
    if not _USER_ID.fullmatch(user_id.encode("utf-8", "surrogatepass")):
        raise ValueError("user_id must be 1 to 128 ASCII letters, digits or _:@+- (no '.')")
    if not _EXPIRES.fullmatch(str(expires_at).encode()):
        raise ValueError("expires_at must be a positive number of Unix seconds")
    message = f"v1.{user_id}.{expires_at}".encode()
    return f"{SESSION_PREFIX}{user_id}.{expires_at}.{_signature(message, secret).decode()}"


def verify_session(token: str, secret: str, now: float | None = None) -> str:
    """The user id of a valid, unexpired session token; ``Unauthorized`` otherwise.

    The signature is checked over the exact bytes received (constant-time) before anything is parsed, and the parts
    are then read strictly, so one signed token has exactly one spelling.
    """
    recovery = ["Sign in again on the site, or send no session token to be served anonymously."]
    if not secret:
        raise Unauthorized("This service accepts no session tokens (none is configured).", recovery=recovery)
    raw = token.encode("utf-8", "surrogatepass")
    prefix = SESSION_PREFIX.encode()
    message, dot, signature = raw.removeprefix(prefix).rpartition(b".")
    if not raw.startswith(prefix) or not dot:
        raise Unauthorized("The session token is malformed.", recovery=recovery)
    if not hmac.compare_digest(_signature(b"v1." + message, secret), signature):
        raise Unauthorized("The session token's signature does not verify.", recovery=recovery)
    user_id, dot, expires_raw = message.partition(b".")
    if not dot or not _USER_ID.fullmatch(user_id) or not _EXPIRES.fullmatch(expires_raw):
        raise Unauthorized("The session token is malformed.", recovery=recovery)
    if int(expires_raw) <= (now if now is not None else time.time()):
        raise Unauthorized("The session token has expired.", recovery=recovery)
    return user_id.decode("ascii")
