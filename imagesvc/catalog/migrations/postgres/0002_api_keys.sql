-- 2: API keys, stored only as hashes; the id is the key's public, non-secret reference.
CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    secret_hash TEXT NOT NULL UNIQUE,
    tier TEXT NOT NULL,
    label TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    expires_at TEXT,
    revoked_at TEXT
);
