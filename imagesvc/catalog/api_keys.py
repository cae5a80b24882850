"""API keys: issue, look up, list and revoke. Only a hash of each key is stored.

A key reads ``isk_<id>_<secret>``: ``<id>`` (8 hex digits) is the public reference shown in usage meters, provenance
notes and logs; ``<secret>`` carries 256 bits from ``secrets``. With that much entropy a plain SHA-256 is a safe
stored form (no password stretching is needed), and the lookup goes by that hash, so the secret is never compared
character by character; the final equality check uses ``hmac.compare_digest`` all the same.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

from imagesvc.access.policy import key_tier
from imagesvc.catalog import Catalog

__all__ = ["ApiKey", "create_key", "list_keys", "lookup_key", "revoke_key"]

_KEY_RE = re.compile(r"^isk_([0-9a-f]{8})_([A-Za-z0-9_-]{43})$")


@dataclass(frozen=True)
class ApiKey:
    """A stored key, without its secret."""

    id: str
    tier: str
    label: str
    created_at: str
    expires_at: str | None
    revoked_at: str | None

    def state(self, now: datetime | None = None) -> str:
        """``active``, ``revoked`` or ``expired``."""
        if self.revoked_at:
            return "revoked"
        if self.expires_at and datetime.fromisoformat(self.expires_at) <= (now or datetime.now(UTC)):
            return "expired"
        return "active"


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def create_key(catalog: Catalog, tier: str, label: str = "", expires_at: datetime | None = None) -> tuple[str, ApiKey]:
    """Issue a key; returns the full key (shown once, never stored) and its record."""
    key_tier(tier)
    while True:
        key_id = secrets.token_hex(4)
        key = f"isk_{key_id}_{secrets.token_urlsafe(32)}"
        with catalog.transaction(search=False) as conn:
            if conn.execute("SELECT 1 FROM api_keys WHERE id = ?", (key_id,)).fetchone():
                continue
            conn.execute(
                "INSERT INTO api_keys (id, secret_hash, tier, label, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)",
                (key_id, _hash(key), tier, label, _now(), expires_at.isoformat() if expires_at else None),
            )
        record = ApiKey(key_id, tier, label, _now(), expires_at.isoformat() if expires_at else None, None)
        return key, record


def _record(row: dict) -> ApiKey:
    return ApiKey(row["id"], row["tier"], row["label"], row["created_at"], row["expires_at"], row["revoked_at"])


def lookup_key(catalog: Catalog, key: str) -> ApiKey | None:
    """The record of a presented key, or None when the key is malformed or unknown (revoked ones are returned)."""
    match = _KEY_RE.match(key)
    if match is None:
        return None
    digest = _hash(key)
    row = catalog.query_one("SELECT * FROM api_keys WHERE secret_hash = ?", (digest,))
    if row is None or not hmac.compare_digest(row["secret_hash"], digest) or row["id"] != match.group(1):
        return None
    return _record(row)


def list_keys(catalog: Catalog) -> list[ApiKey]:
    return [_record(r) for r in catalog.query_all("SELECT * FROM api_keys ORDER BY created_at, id")]


def revoke_key(catalog: Catalog, key_id: str) -> bool:
    """Revoke by public id; returns whether a live key was revoked."""
    with catalog.transaction(search=False) as conn:
        cur = conn.execute("UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (_now(), key_id))
    return cur.rowcount > 0
